//! Milliseconds on a monotonic clock, for deadlines and marks kept in atomics (a wall-clock
//! step must not end or stretch them). Knows nothing else.

/// Milliseconds since the first call, plus one: never 0, so 0 can mean "never" or "none".
pub fn monotonic_ms() -> i64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as i64
        + 1
}
