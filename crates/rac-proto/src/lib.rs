//! RAC v1 wire format (work in progress).
