//! Page-cache-only file access for `offload = auto` (owned by the offload-auto work; placeholder).
