//! Remote OpenCL (work in progress).
