//! `sandloop inspect`: what a component is, which protocols it offers, how
//! its replay points can fork children, and — when it does not fit the
//! contract — what is missing or mistyped, in words an adapter author can
//! act on.

use std::sync::Arc;

use serde::Serialize;

use super::args::InspectArgs;
use super::compile_notice::while_compiling;
use super::{CliError, open_sandbox, say};
use crate::sandbox::SandboxConfig;
use crate::sandbox::component::{Problem, examine};
use crate::sandbox::snapshot::{ForkKind, ForkSupport};

/// The `forks` line of the text report.
fn describe(forks: &ForkSupport) -> String {
    let auto = match forks.auto {
        Some(ForkKind::State) => "; --fork auto forks by state",
        Some(ForkKind::Snapshot) => "; --fork auto forks by snapshot",
        None => "",
    };
    match (forks.state, forks.snapshot, &forks.snapshot_error) {
        (false, false, None) => "none (no `replay` export: no replay points to fork from)".into(),
        (true, true, _) => format!(
            "state, snapshot (wizer instruments it in {:.0} ms){auto}",
            forks.instrument_ms.unwrap_or(0.0)
        ),
        (false, true, _) => format!(
            "snapshot (wizer instruments it in {:.0} ms){auto}",
            forks.instrument_ms.unwrap_or(0.0)
        ),
        (state, _, error) => format!(
            "{}snapshot impossible: {}{auto}",
            if state { "state; " } else { "" },
            error.as_deref().unwrap_or("unknown")
        ),
    }
}

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
        super::check_cache_flag(Some(&dir))?;
        config.cache_dir = Some(dir);
    }
    let (engine, config) = open_sandbox(config)?;
    let cached = config.cache_dir.is_some();
    let examined = while_compiling(&args.component, "NAME", cached, args.json, || {
        examine(&args.component, engine, Arc::clone(&config))
    });
    let examined = match examined {
        Ok(examined) => examined,
        Err(error) if args.json => {
            // What cannot be examined at all is still one problem object.
            #[derive(Serialize)]
            struct Unusable {
                path: String,
                problems: [Problem; 1],
            }
            let unusable = Unusable {
                path: args.component.display().to_string(),
                problems: [Problem::new(error.kind(), error.to_string())],
            };
            say(&serde_json::to_string_pretty(&unusable).expect("the problem serialises"));
            return Err(error.into());
        }
        Err(error) => return Err(error.into()),
    };
    let info = &examined.info;
    let bytes = std::fs::read(&args.component).ok();
    let forks = ForkSupport::check(&info.path, bytes.as_deref(), &examined.protocols());
    if args.json {
        /// The info's fields in their order, the forks, then the problems.
        #[derive(Serialize)]
        struct Inspection<'a> {
            #[serde(flatten)]
            info: &'a crate::sandbox::ComponentInfo,
            forks: &'a ForkSupport,
            problems: &'a [crate::sandbox::component::Problem],
        }
        let inspection = Inspection {
            info,
            forks: &forks,
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
        say(&format!("forks      {}", describe(&forks)));
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
