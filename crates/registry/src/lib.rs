//! `netaccel-registry`: the cluster's control plane.
pub mod alloc;
