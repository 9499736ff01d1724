//! netaccel node.
