//! The `content-server` command line (placeholder until the server core lands).
fn main() {
    eprintln!("content-server: not implemented yet");
    std::process::exit(2);
}
