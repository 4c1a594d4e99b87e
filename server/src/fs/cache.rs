//! Bounded cache of open file descriptors with stat data (owned by the offload-auto work; placeholder).
