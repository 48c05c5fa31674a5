//! `sandloop inspect`: what a component is, which protocols it offers, and —
//! when it does not fit the contract — what is missing or mistyped, in words
//! an adapter author can act on.

use std::sync::Arc;

use super::args::InspectArgs;
use super::{CliError, open_sandbox, say};
use crate::sandbox::SandboxConfig;
use crate::sandbox::component::examine;

/// Print the component's facts; `--json` prints [`crate::sandbox::ComponentInfo`]
/// plus `problems` (each [`crate::sandbox::component::Problem`]; empty for a
/// usable adapter).
///
/// A component that cannot be used is still described on stdout; the error
/// (exit code 2) explains each problem: the interface at another WIT version,
/// the missing function or the wrong signature (expected and found WIT side
/// by side), the interface exported without the one it builds on.
pub fn inspect(args: InspectArgs) -> Result<(), CliError> {
    // The same engine settings as a default `sandloop run`, so both share
    // one compiled copy in the cache.
    let mut config = SandboxConfig::default();
    if args.no_cache {
        config.cache_dir = None;
    } else if let Some(dir) = args.cache_dir {
        config.cache_dir = Some(dir);
    }
    let (engine, config) = open_sandbox(config)?;
    let examined = examine(&args.component, engine, Arc::clone(&config))?;
    let info = &examined.info;
    if args.json {
        /// The info's fields in their order, then the problems.
        #[derive(serde::Serialize)]
        struct Inspection<'a> {
            #[serde(flatten)]
            info: &'a crate::sandbox::ComponentInfo,
            problems: &'a [crate::sandbox::component::Problem],
        }
        let inspection = Inspection {
            info,
            problems: &examined.problems,
        };
        say(&serde_json::to_string_pretty(&inspection).expect("inspection serialises"));
    } else {
        say(&format!("component  {}", info.path));
        say(&format!("sha256     {}", info.sha256));
        say(&format!("size       {} bytes", info.size_bytes));
        if info.protocols.is_empty() {
            say("protocols  none");
        } else {
            say(&format!("protocols  {}", info.protocols.join(", ")));
        }
        say("exports");
        for export in &info.exports {
            say(&format!("  {export}"));
        }
        say("imports");
        for import in &info.imports {
            say(&format!("  {import}"));
        }
        say(&format!(
            "compile    {:.1} ms ({})",
            info.compile_ms,
            serde_json::to_value(info.cache)
                .expect("enum serialises")
                .as_str()
                .unwrap_or("")
        ));
    }
    match examined.error() {
        Some(error) => Err(error.into()),
        None => Ok(()),
    }
}
