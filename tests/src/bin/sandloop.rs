//! The `sandloop` binary, built inside this package so the end-to-end tests
//! can find it through `CARGO_BIN_EXE_sandloop`. Same entry point and
//! allocator as the installed binary (`host/src/main.rs`).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    sandloop::allocator::configure();
    std::process::exit(sandloop::cli::main());
}
