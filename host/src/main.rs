fn main() {
    std::process::exit(sandloop::cli::main());
}
