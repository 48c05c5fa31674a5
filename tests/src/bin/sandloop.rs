//! The `sandloop` binary, built inside this package so the end-to-end tests
//! can find it through `CARGO_BIN_EXE_sandloop`. Same entry point as the
//! installed binary.

fn main() {
    std::process::exit(sandloop::cli::main());
}
