//! The same no-op adapter logic as a Rust, Python, JavaScript and C
//! component, side by side in one run: size, first compile, and host cost
//! per item through `sandloop run` (`examples/bench-adapter`,
//! `examples/python-adapter/noop.py`, `examples/js-adapter/noop.js`,
//! `examples/c-adapter/noop.c`), then one line per language against Rust
//! (`c adapter: N.NNx rust`).
//!
//! Run: `cargo bench -p sandloop-tests --bench languages`
//! (`SANDLOOP_BENCH_SEEDS=N`, default 4,546 seeds = 50,006 items;
//! `SANDLOOP_BENCH_RUNS=N`, default 3; figures are medians). The Python,
//! JavaScript and C components exist when `.ci/guest-toolchains.sh` was run
//! before the build.
//!
//! - compile: wall time of a 1-item run with an empty compiled-component
//!   cache minus the same run with the cache warm;
//! - per item: (wall time of the full run − wall time of a 1-seed run) /
//!   items, so process start-up and loading are not counted.

use std::time::Instant;

#[path = "common/runs.rs"]
mod runs;
use runs::{VARIANTS_PER_SEED, env_usize, median, sandloop_run, write_items};

fn main() {
    runs::serve_peak_rss_request();
    if std::env::args().any(|arg| arg == "--list") {
        return; // `cargo test --benches` probing
    }
    let seeds = env_usize("SANDLOOP_BENCH_SEEDS", 4_546);
    let runs = env_usize("SANDLOOP_BENCH_RUNS", 3).max(1);
    let dir = tempfile::tempdir().unwrap();
    let items_path = dir.path().join("items.jsonl");
    let one_path = dir.path().join("one.jsonl");
    let items = write_items(&items_path, seeds);
    let one = write_items(&one_path, 1);
    let components = [
        (
            "rust",
            "Rust (bench-adapter)",
            Some(sandloop_tests::BENCH_ADAPTER),
        ),
        (
            "python",
            "Python (componentize-py)",
            sandloop_tests::python_noop(),
        ),
        (
            "js",
            "JavaScript (componentize-js)",
            sandloop_tests::js_noop(),
        ),
        ("c", "C (clang 19, wasi-libc)", sandloop_tests::c_noop()),
    ];
    println!(
        "no-op adapter per language: {items} items ({seeds} seeds x (1 + {VARIANTS_PER_SEED} variants)), 1 worker, median of {runs} runs"
    );
    println!(
        "{:<30} {:>10} {:>12} {:>10} {:>12} {:>8}",
        "", "size KB", "compile s", "wall s", "µs / item", "vs Rust"
    );
    let mut rust_per_item = None;
    let mut ratios = Vec::new();
    for (lang, name, component) in components {
        let Some(component) = component else {
            println!("{name:<30} not built (run bash .ci/guest-toolchains.sh, then build again)");
            continue;
        };
        let size = std::fs::metadata(component).unwrap().len() as f64 / 1024.0;
        let cache = dir.path().join(format!("cache-{}", name.len()));
        let started = Instant::now();
        sandloop_run(component, &one_path, 1, &cache);
        let cold = started.elapsed().as_secs_f64();
        let base = median(
            (0..runs)
                .map(|_| sandloop_run(component, &one_path, 1, &cache))
                .collect(),
        );
        let wall = median(
            (0..runs)
                .map(|_| sandloop_run(component, &items_path, 1, &cache))
                .collect(),
        );
        let per_item = (wall - base) / (items - one) as f64 * 1e6;
        let ratio = rust_per_item.get_or_insert(per_item);
        println!(
            "{name:<30} {size:>10.0} {:>12.2} {wall:>10.2} {per_item:>12.2} {:>7.1}x",
            cold - base,
            per_item / *ratio
        );
        if lang != "rust" {
            ratios.push((lang, per_item / *ratio));
        }
    }
    for (lang, ratio) in ratios {
        println!("{lang} adapter: {ratio:.2}x rust");
    }
}
