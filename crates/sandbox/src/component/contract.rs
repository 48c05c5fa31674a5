//! Checking a component's exports against the contract of
//! `wit/adapter.wit`: which protocols it offers (only those whose interfaces
//! fit), and every way it does not fit, in words an adapter author can act
//! on — what `sandloop inspect` reports and [`load`](super::load) refuses.

use serde::Serialize;

use super::wit::{HOST_WORLD, WitFunction, wit_functions, wit_world_exports};
use sandloop_contract::{WIT_PACKAGE, WIT_VERSION};
use sandloop_core::episode::adapter::Protocols;

/// The full name of contract interface `short`
/// (`sandloop:adapter/episode@0.2.0` for `episode`).
pub(crate) fn interface_name(short: &str) -> String {
    format!("{WIT_PACKAGE}/{short}@{WIT_VERSION}")
}

/// One way a component breaks the contract (`sandloop inspect --json`
/// lists them under `problems`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// `other_version`, `missing_function`, `wrong_signature`,
    /// `not_an_interface`, `unmet_dependency` or `nothing_to_run`.
    pub kind: &'static str,
    /// The interface concerned, as the host expects it
    /// (`sandloop:adapter/episode@0.2.0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// The function concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// What the host expects, as written in the WIT (a function signature,
    /// or the package version).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    /// What the component has instead, rendered as WIT.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found: Option<String>,
    /// Why the found function does not fit (wasmtime's type check).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// One sentence saying what is wrong and what to do.
    pub message: String,
}

impl Problem {
    /// A problem of `kind` told by `message` alone.
    pub fn new(kind: &'static str, message: String) -> Self {
        Problem {
            kind,
            interface: None,
            function: None,
            expected: None,
            found: None,
            detail: None,
            message,
        }
    }

    /// The problem as text: its message, then the expected and the found
    /// form, one per line, indented by `indent`.
    pub fn explain(&self, indent: &str) -> String {
        let mut text = self.message.clone();
        for (label, value) in [
            ("expected", &self.expected),
            ("found   ", &self.found),
            ("why     ", &self.detail),
        ] {
            if let Some(value) = value {
                text.push_str(&format!("\n{indent}{label}  {value}"));
            }
        }
        text
    }
}

/// Several problems become one message naming each; `None` when there are
/// none.
pub(crate) fn explain_problems(problems: &[Problem]) -> Option<String> {
    match problems {
        [] => None,
        [one] => Some(one.explain("    ")),
        many => {
            let mut text = format!(
                "does not fit the adapter contract of this host (WIT {WIT_PACKAGE}@{WIT_VERSION}); \
                 {} problems:",
                many.len()
            );
            for problem in many {
                text.push_str(&format!("\n  - {}", problem.explain("      ")));
            }
            Some(text)
        }
    }
}

/// The smallest world exporting `interface` with what it builds on, for
/// hints (`plain` for `episode`).
fn world_for(interface: &str) -> &'static str {
    match interface {
        "episode" => "plain",
        "episode-groups" => "grouped",
        "seeds" | "variants" => "explorer",
        "replay" => "replayable",
        "counterfactual" => "counterfactual-fixes",
        _ => "isolated",
    }
}

/// The protocol an interface gives (`legacy` for `episode`).
fn protocol_of(interface: &str) -> &'static str {
    let mut protocols = Protocols::default();
    set_protocol(&mut protocols, interface);
    protocols.names().first().copied().unwrap_or("none")
}

/// Mark `interface`'s protocol as offered; false for an unknown name.
fn set_protocol(protocols: &mut Protocols, interface: &str) -> bool {
    let flag = match interface {
        "episode" => &mut protocols.execute,
        "seeds" => &mut protocols.seeds,
        "variants" => &mut protocols.variants,
        "episode-groups" => &mut protocols.episode_groups,
        "replay" => &mut protocols.replay,
        "replay-children" => &mut protocols.replay_children,
        "child-risk" => &mut protocols.child_risk,
        "counterfactual" => &mut protocols.counterfactual,
        _ => return false,
    };
    *flag = true;
    true
}

/// An export of the component, as far as the contract check needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FoundItem {
    /// An exported instance (an interface) and the functions it exports.
    Instance(Vec<FoundFunction>),
    /// A function exported at the top level of the component, as WIT.
    Function(String),
    /// Anything else: what it is (`type`, `resource`, `module`, ...).
    Other(&'static str),
}

/// A function an exported instance offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FoundFunction {
    /// Its name in the instance.
    pub name: String,
    /// Its type rendered as WIT.
    pub signature: String,
    /// Why it does not fit the contract's function of the same name (the
    /// type check's error); `None` when it fits or the contract has no such
    /// function.
    pub mismatch: Option<String>,
}

/// What [`check_contract`] concluded.
#[derive(Clone, Debug, Default)]
pub(crate) struct ContractReport {
    /// The protocols whose interfaces fit the contract.
    pub protocols: Protocols,
    /// Every way the exports break the contract.
    pub problems: Vec<Problem>,
}

/// Check the component's exports against the contract in
/// [`WIT_SOURCE`](super::WIT_SOURCE): interfaces of another package
/// version, missing or mistyped functions, interfaces exported without the
/// one they build on, and nothing to run items with.
pub(crate) fn check_contract(found: &[(String, FoundItem)]) -> ContractReport {
    let mut check = Checking::default();
    for (name, _) in found {
        if let Some((short, problem)) = other_version(name) {
            check.refuse(short, problem);
        }
    }
    for short in wit_world_exports(HOST_WORLD) {
        let full = interface_name(short);
        if let Some((_, item)) = found.iter().find(|(name, _)| *name == full) {
            check.interface(short, &full, item);
        }
    }
    for message in unmet_dependencies(&check.present) {
        check
            .report
            .problems
            .push(Problem::new("unmet_dependency", message));
    }
    // Nothing to run items with, and no problem above that explains why.
    let present = check.present;
    if !present.execute && !present.episode_groups && !check.runnable_problem {
        check
            .report
            .problems
            .push(nothing_to_run_problem(found, &present));
    }
    check.report
}

/// The state of one [`check_contract`].
#[derive(Default)]
struct Checking {
    /// What is concluded so far.
    report: ContractReport,
    /// The contract interfaces exported as interfaces, fitting or not.
    present: Protocols,
    /// Whether a problem with `episode` or `episode-groups` was reported,
    /// which already explains why nothing can run items.
    runnable_problem: bool,
}

impl Checking {
    /// Report `problem` with contract interface `short`.
    fn refuse(&mut self, short: &str, problem: Problem) {
        self.runnable_problem |= matches!(short, "episode" | "episode-groups");
        self.report.problems.push(problem);
    }

    /// Check the export `full` (contract interface `short`) function by
    /// function; its protocol is offered only when every function fits.
    fn interface(&mut self, short: &str, full: &str, item: &FoundItem) {
        let functions = match item {
            FoundItem::Instance(functions) => functions,
            other => {
                self.refuse(short, not_an_interface(short, full, other));
                return;
            }
        };
        set_protocol(&mut self.present, short);
        let protocol = protocol_of(short);
        let mut fits = true;
        for expected in wit_functions(short) {
            if let Some(problem) = function_problem(full, protocol, expected, functions) {
                fits = false;
                self.refuse(short, problem);
            }
        }
        if fits {
            set_protocol(&mut self.report.protocols, short);
        }
    }
}

/// The problem with export `name` when it is an interface of this package at
/// another version (or none), with the interface's short name.
fn other_version(name: &str) -> Option<(&str, Problem)> {
    let rest = name.strip_prefix(WIT_PACKAGE)?.strip_prefix('/')?;
    let (short, version) = rest.split_once('@').unwrap_or((rest, ""));
    if version == WIT_VERSION {
        return None;
    }
    let built_against = if version.is_empty() {
        "an unversioned WIT package".to_string()
    } else {
        format!("WIT package {WIT_PACKAGE}@{version}")
    };
    let mut problem = Problem::new(
        "other_version",
        format!(
            "exports `{name}`, but this host speaks {WIT_PACKAGE}@{WIT_VERSION}: the adapter \
             was built against {built_against}; rebuild the adapter against the WIT shipped \
             with this sandloop (`sandloop new adapter` copies it to wit/adapter.wit)"
        ),
    );
    problem.interface = Some(interface_name(short));
    problem.expected = Some(format!("{WIT_PACKAGE}@{WIT_VERSION}"));
    problem.found = Some(if version.is_empty() {
        WIT_PACKAGE.to_string()
    } else {
        format!("{WIT_PACKAGE}@{version}")
    });
    Some((short, problem))
}

/// The problem with export `full` (contract interface `short`) being a
/// function or anything else instead of an interface.
fn not_an_interface(short: &str, full: &str, item: &FoundItem) -> Problem {
    let (what, found) = match item {
        FoundItem::Function(signature) => ("function", Some(signature.clone())),
        FoundItem::Other(what) => (*what, None),
        FoundItem::Instance(_) => ("instance", None),
    };
    let mut problem = Problem::new(
        "not_an_interface",
        format!(
            "exports `{full}` as a {what}, not as an interface; export the interface `{short}` \
             (world `{}` of wit/adapter.wit)",
            world_for(short)
        ),
    );
    problem.interface = Some(full.to_string());
    problem.found = found;
    problem
}

/// The problem with function `expected` of interface `full` (offering
/// `protocol`) among the `functions` the component exports there: missing
/// or mistyped; `None` when it fits.
fn function_problem(
    full: &str,
    protocol: &str,
    expected: &WitFunction,
    functions: &[FoundFunction],
) -> Option<Problem> {
    let offered = functions
        .iter()
        .find(|function| function.name == expected.name);
    let problem = match offered {
        None => {
            let found = if functions.is_empty() {
                format!("no `{}`, and no functions at all", expected.name)
            } else {
                format!(
                    "no `{}`, only: {}",
                    expected.name,
                    functions
                        .iter()
                        .map(|function| function.signature.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            };
            let mut problem = Problem::new(
                "missing_function",
                format!(
                    "exports `{full}` without its function `{}`, so it cannot offer \
                     protocol {protocol}; add the function with exactly this signature",
                    expected.name
                ),
            );
            problem.found = Some(found);
            problem
        }
        Some(function) => {
            let why = function.mismatch.as_ref()?;
            let mut problem = Problem::new(
                "wrong_signature",
                format!(
                    "exports `{full}`, but its function `{}` has the wrong signature, so it \
                     cannot offer protocol {protocol}; change it to the expected one (the \
                     types are those of interface `types` in wit/adapter.wit; `json` is a \
                     `string`)",
                    expected.name
                ),
            );
            problem.found = Some(function.signature.clone());
            problem.detail = Some(why.clone());
            problem
        }
    };
    Some(Problem {
        interface: Some(full.to_string()),
        function: Some(expected.name.clone()),
        expected: Some(expected.signature.clone()),
        ..problem
    })
}

/// The `nothing_to_run` problem of a component exporting `found`, of which
/// `present` are contract interfaces: the expected interfaces, and a hint
/// when the contract's functions are exported at the top level or the
/// component is a loop workflow plugin.
fn nothing_to_run_problem(found: &[(String, FoundItem)], present: &Protocols) -> Problem {
    let names: Vec<String> = found.iter().map(|(name, _)| name.clone()).collect();
    let mut problem = Problem::new("nothing_to_run", nothing_to_run(present, &names));
    problem.interface = Some(interface_name("episode"));
    problem.expected = Some(format!(
        "`{}` with {} (world `plain` of wit/adapter.wit), or `{}` (world `grouped-only`)",
        interface_name("episode"),
        wit_functions("episode")
            .iter()
            .map(|function| function.signature.as_str())
            .collect::<Vec<_>>()
            .join("; "),
        interface_name("episode-groups")
    ));
    // Functions of the contract exported at the top level instead of
    // inside their interface.
    let misplaced: Vec<&str> = found
        .iter()
        .filter_map(|(name, item)| match item {
            FoundItem::Function(signature) => wit_world_exports(HOST_WORLD)
                .iter()
                .any(|short| {
                    wit_functions(short)
                        .iter()
                        .any(|function| function.name == *name)
                })
                .then_some(signature.as_str()),
            _ => None,
        })
        .collect();
    if !misplaced.is_empty() {
        problem.found = Some(misplaced.join("; "));
        problem.message.push_str(
            "; the component exports the contract's functions at its top level, but each \
             must be inside its interface (export the interface, e.g. `export episode;` in \
             the world)",
        );
    } else if names.iter().any(|name| *name == interface_name("step")) {
        problem.message.push_str(
            "; this is a loop workflow plugin (world `workflow`): run it with \
             `sandloop loop`, not as an adapter",
        );
    }
    problem
}

/// What is exported without the interface it builds on, one message each:
/// `child-risk` and `counterfactual` need `replay-children`, which needs
/// `replay`, which needs `episode-groups`.
fn unmet_dependencies(protocols: &Protocols) -> Vec<String> {
    let mut unmet = Vec::new();
    for (has, needs, name, needed) in [
        (
            protocols.child_risk,
            protocols.replay_children,
            "child-risk",
            "replay-children",
        ),
        (
            protocols.replay_children,
            protocols.replay,
            "replay-children",
            "replay",
        ),
        (
            protocols.counterfactual,
            protocols.replay_children,
            "counterfactual",
            "replay-children",
        ),
    ] {
        if has && !needs {
            unmet.push(format!(
                "exports `{}` without `{}`, which it builds on; export both or neither",
                interface_name(name),
                interface_name(needed)
            ));
        }
    }
    if protocols.replay && !protocols.episode_groups {
        unmet.push(format!(
            "exports `{}` without `{}`: replay points capture the state of a prepared \
             episode group, so an adapter that exports replay must export episode groups too",
            interface_name("replay"),
            interface_name("episode-groups")
        ));
    }
    unmet
}

/// Why a component that exports neither `episode` nor `episode-groups` has
/// nothing to run its items with, naming what it does export.
fn nothing_to_run(protocols: &Protocols, exports: &[String]) -> String {
    let offered: Vec<&str> = [("seeds", protocols.seeds), ("variants", protocols.variants)]
        .into_iter()
        .filter_map(|(name, has)| has.then_some(name))
        .collect();
    let message = if offered.is_empty() {
        format!(
            "exports none of the sandloop episode interfaces; an adapter must export \
             `{}` or `{}`",
            interface_name("episode"),
            interface_name("episode-groups")
        )
    } else {
        format!(
            "exports `{}` but neither `episode` nor `episode-groups`, so there is nothing to \
             run its items with",
            offered.join("` and `")
        )
    };
    let exported = if exports.is_empty() {
        "it exports nothing".to_string()
    } else {
        format!("it exports: {}", exports.join(", "))
    };
    format!("{message} ({exported})")
}

#[cfg(test)]
#[path = "contract_tests.rs"]
mod tests;
