//! content-operator: placeholder until the operator lands (see ARCHITECTURE.md).
fn main() {
    eprintln!("content-operator: not implemented yet");
    std::process::exit(2);
}
