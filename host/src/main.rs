//! The `sandloop` binary: see [`sandloop::cli`].

#![forbid(unsafe_code)]

/// Records are many small maps built and freed across lane threads;
/// mimalloc's thread-local heaps avoid glibc's arena lock contention there.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    sandloop::allocator::configure();
    std::process::exit(sandloop::cli::main());
}
