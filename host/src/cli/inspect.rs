//! `sandloop inspect`: what a component is and which protocols it offers.

use std::sync::Arc;

use super::args::InspectArgs;
use super::{CliError, open_sandbox, say};
use crate::sandbox::{SandboxConfig, load};

/// Print the component's facts; `--json` prints [`crate::sandbox::ComponentInfo`].
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
    let loaded = load(&args.component, engine, Arc::clone(&config))?;
    let info = &loaded.info;
    if args.json {
        say(&serde_json::to_string_pretty(info).expect("info serialises"));
        return Ok(());
    }
    say(&format!("component  {}", info.path));
    say(&format!("sha256     {}", info.sha256));
    say(&format!("size       {} bytes", info.size_bytes));
    say(&format!("protocols  {}", info.protocols.join(", ")));
    say("exports");
    for export in &info.exports {
        say(&format!("  {export}"));
    }
    say("imports");
    for import in &info.imports {
        say(&format!("  {import}"));
    }
    println!(
        "compile    {:.1} ms ({})",
        info.compile_ms,
        serde_json::to_value(info.cache)
            .expect("enum serialises")
            .as_str()
            .unwrap_or("")
    );
    Ok(())
}
