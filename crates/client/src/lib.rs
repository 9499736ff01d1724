//! netaccel client library.
