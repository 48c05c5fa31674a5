//! Running the reference's Python runtimes (`loopx_explore`) beside a
//! bench: where they are, and one script's JSON answer.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The reference's `loopx_explore/` directory holding `module`: from
/// `SANDLOOP_REFERENCE_DIR`, else `../shared/reference/loopx_explore`
/// beside the repository.
pub fn reference_dir(module: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("SANDLOOP_REFERENCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference/loopx_explore")
        });
    dir.join(module).is_file().then_some(dir)
}

/// Runs `benches/reference/SCRIPT` with python3, the reference directory
/// holding `module` and `args` as its arguments; the JSON object it prints,
/// or why there is none.
pub fn run_script(
    script: &str,
    module: &str,
    args: &[&OsStr],
) -> Result<serde_json::Value, String> {
    let dir = reference_dir(module).ok_or(
        "not found: set SANDLOOP_REFERENCE_DIR to the reference's loopx_explore/ directory",
    )?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("benches/reference")
        .join(script);
    let output = std::process::Command::new("python3")
        .arg(&script)
        .arg(&dir)
        .args(args)
        .output()
        .map_err(|error| format!("cannot run python3: {error}"))?;
    if !output.status.success() {
        return Err(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    serde_json::from_slice(&output.stdout).map_err(|error| format!("unreadable output: {error}"))
}
