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
mod tests {
    use super::super::exports::contract_interface;
    use super::super::typecheck::checker;
    use super::*;
    use crate::component::LoadError;

    fn protocols(execute: bool, seeds: bool, variants: bool, episode_groups: bool) -> Protocols {
        Protocols {
            execute,
            seeds,
            variants,
            episode_groups,
            replay: false,
            replay_children: false,
            child_risk: false,
            counterfactual: false,
        }
    }

    /// An instance exporting `functions` of `interface` as the contract
    /// declares them, all fitting.
    fn fitting(interface: &str) -> (String, FoundItem) {
        (
            interface_name(interface),
            FoundItem::Instance(
                wit_functions(interface)
                    .iter()
                    .map(|function| FoundFunction {
                        name: function.name.clone(),
                        signature: function.signature.clone(),
                        mismatch: None,
                    })
                    .collect(),
            ),
        )
    }

    fn messages(report: &ContractReport) -> Vec<String> {
        report
            .problems
            .iter()
            .map(|problem| problem.explain("  "))
            .collect()
    }

    #[test]
    fn replay_without_episode_groups_is_refused_by_name() {
        let mut replay_only = protocols(true, false, false, false);
        replay_only.replay = true;
        let unmet = unmet_dependencies(&replay_only);
        assert_eq!(unmet.len(), 1);
        assert!(
            unmet[0].contains("exports `sandloop:adapter/replay@0.2.0` without `sandloop:adapter/episode-groups@0.2.0`"),
            "{unmet:?}"
        );
        let mut both = protocols(false, false, false, true);
        both.replay = true;
        assert!(unmet_dependencies(&both).is_empty());
        let mut risk_only = both;
        risk_only.child_risk = true;
        let unmet = unmet_dependencies(&risk_only);
        assert!(
            unmet[0].contains("exports `sandloop:adapter/child-risk@0.2.0` without `sandloop:adapter/replay-children@0.2.0`"),
            "{unmet:?}"
        );
        let mut children_only = protocols(false, false, false, true);
        children_only.replay_children = true;
        let unmet = unmet_dependencies(&children_only);
        assert!(
            unmet[0].contains(
                "`sandloop:adapter/replay-children@0.2.0` without `sandloop:adapter/replay@0.2.0`"
            ),
            "{unmet:?}"
        );
        children_only.replay = true;
        children_only.child_risk = true;
        assert!(unmet_dependencies(&children_only).is_empty());
        let mut counterfactual_only = protocols(false, false, false, true);
        counterfactual_only.replay = true;
        counterfactual_only.counterfactual = true;
        let unmet = unmet_dependencies(&counterfactual_only);
        assert!(
            unmet[0].contains(
                "`sandloop:adapter/counterfactual@0.2.0` without `sandloop:adapter/replay-children@0.2.0`"
            ),
            "{unmet:?}"
        );

        // Every unmet dependency is reported, not only the first.
        let report =
            check_contract(&[fitting("episode"), fitting("replay"), fitting("child-risk")]);
        let unmet: Vec<&Problem> = report
            .problems
            .iter()
            .filter(|problem| problem.kind == "unmet_dependency")
            .collect();
        assert_eq!(unmet.len(), 2, "{:?}", messages(&report));
        assert_eq!(
            report.protocols.names(),
            ["legacy", "replayable-v2", "child-risk-v0"]
        );
    }

    #[test]
    fn an_adapter_must_export_something_to_run_items_with() {
        assert!(check_contract(&[fitting("episode")]).problems.is_empty());
        assert!(
            check_contract(&[
                fitting("seeds"),
                fitting("variants"),
                fitting("episode-groups")
            ])
            .problems
            .is_empty()
        );
        let none = check_contract(&[(
            "wasi:cli/run@0.2.6".to_string(),
            FoundItem::Instance(vec![]),
        )]);
        assert_eq!(none.problems.len(), 1);
        assert_eq!(none.problems[0].kind, "nothing_to_run");
        let text = explain_problems(&none.problems).unwrap();
        assert!(
            text.starts_with("exports none of the sandloop episode interfaces"),
            "{text}"
        );
        assert!(text.contains("it exports: wasi:cli/run@0.2.6"), "{text}");
        assert!(
            text.contains("execute: func(item: json, ctx: context) -> result<json, adapter-error>"),
            "the expected signature is shown: {text}"
        );
        let seeds_only = check_contract(&[fitting("seeds"), fitting("variants")]);
        assert!(
            seeds_only.problems[0].message.contains(
                "exports `seeds` and `variants` but neither `episode` nor `episode-groups`"
            ),
            "{:?}",
            messages(&seeds_only)
        );
    }

    #[test]
    fn exports_of_another_wit_version_name_both_versions() {
        let report = check_contract(&[(
            "sandloop:adapter/episode@0.0.9".to_string(),
            FoundItem::Instance(vec![]),
        )]);
        // The version problem explains it; no second "nothing to run".
        assert_eq!(report.problems.len(), 1, "{:?}", messages(&report));
        let problem = &report.problems[0];
        assert_eq!(problem.kind, "other_version");
        assert_eq!(problem.expected.as_deref(), Some("sandloop:adapter@0.2.0"));
        assert_eq!(problem.found.as_deref(), Some("sandloop:adapter@0.0.9"));
        assert_eq!(
            problem.interface.as_deref(),
            Some("sandloop:adapter/episode@0.2.0")
        );
        assert!(
            problem.message.contains("sandloop:adapter/episode@0.0.9"),
            "{}",
            problem.message
        );
        assert!(
            problem
                .message
                .contains("this host speaks sandloop:adapter@0.2.0"),
            "{}",
            problem.message
        );
        let unversioned = check_contract(&[
            fitting("episode"),
            (
                "sandloop:adapter/seeds".to_string(),
                FoundItem::Instance(vec![]),
            ),
        ]);
        assert_eq!(unversioned.problems.len(), 1);
        assert!(
            unversioned.problems[0]
                .message
                .contains("an unversioned WIT package")
        );
        let ours = check_contract(&[
            fitting("episode"),
            (
                "wasi:cli/run@0.2.6".to_string(),
                FoundItem::Instance(vec![]),
            ),
        ]);
        assert!(ours.problems.is_empty());
        assert_eq!(ours.protocols.names(), ["legacy"]);
    }

    #[test]
    fn missing_and_mistyped_functions_show_expected_and_found_signatures() {
        let report = check_contract(&[(
            interface_name("episode"),
            FoundItem::Instance(vec![FoundFunction {
                name: "run".into(),
                signature: "run: func(item: string) -> string".into(),
                mismatch: None,
            }]),
        )]);
        assert_eq!(report.problems.len(), 1, "{:?}", messages(&report));
        let problem = &report.problems[0];
        assert_eq!(problem.kind, "missing_function");
        assert_eq!(problem.function.as_deref(), Some("execute"));
        assert_eq!(
            problem.expected.as_deref(),
            Some("execute: func(item: json, ctx: context) -> result<json, adapter-error>")
        );
        assert_eq!(
            problem.found.as_deref(),
            Some("no `execute`, only: run: func(item: string) -> string")
        );
        assert!(report.protocols.names().is_empty());

        let report = check_contract(&[
            fitting("episode"),
            (
                interface_name("seeds"),
                FoundItem::Instance(vec![FoundFunction {
                    name: "list-seed-items".into(),
                    signature: "list-seed-items: func(arm: string) -> list<string>".into(),
                    mismatch: Some("expected 2 types, found 1".into()),
                }]),
            ),
        ]);
        assert_eq!(report.problems.len(), 1, "{:?}", messages(&report));
        let problem = &report.problems[0];
        assert_eq!(problem.kind, "wrong_signature");
        assert_eq!(
            problem.expected.as_deref(),
            Some(
                "list-seed-items: func(arm: string, epoch: u32) -> result<list<json>, adapter-error>"
            )
        );
        let text = problem.explain("  ");
        assert!(
            text.contains("found     list-seed-items: func(arm: string) -> list<string>"),
            "{text}"
        );
        assert!(text.contains("expected 2 types, found 1"), "{text}");
        // The broken interface gives no protocol; the fitting one does.
        assert_eq!(report.protocols.names(), ["legacy"]);
    }

    #[test]
    fn functions_exported_outside_their_interface_are_pointed_out() {
        let report = check_contract(&[(
            "execute".to_string(),
            FoundItem::Function("execute: func(item: string) -> string".into()),
        )]);
        assert_eq!(report.problems.len(), 1);
        let problem = &report.problems[0];
        assert_eq!(problem.kind, "nothing_to_run");
        assert!(
            problem.message.contains("at its top level"),
            "{}",
            problem.message
        );
        assert_eq!(
            problem.found.as_deref(),
            Some("execute: func(item: string) -> string")
        );
    }

    #[test]
    fn several_problems_are_listed_one_by_one() {
        let report = check_contract(&[
            (
                "sandloop:adapter/episode@0.0.9".to_string(),
                FoundItem::Instance(vec![]),
            ),
            fitting("replay-children"),
        ]);
        let text = explain_problems(&report.problems).unwrap();
        assert!(
            text.starts_with("does not fit the adapter contract"),
            "{text}"
        );
        assert!(
            text.contains("\n  - exports `sandloop:adapter/episode@0.0.9`"),
            "{text}"
        );
        assert!(
            text.contains("\n  - exports `sandloop:adapter/replay-children@0.2.0` without"),
            "{text}"
        );
        // The error names the file once, first.
        let error = LoadError::Contract {
            path: "a.wasm".into(),
            message: text,
        };
        assert!(error.to_string().starts_with("a.wasm: does not fit"));
    }

    #[test]
    fn the_embedded_wit_is_parsed_into_every_interface_and_function() {
        let interfaces = wit_world_exports(HOST_WORLD);
        assert_eq!(
            interfaces,
            [
                "episode",
                "seeds",
                "variants",
                "episode-groups",
                "replay",
                "replay-children",
                "child-risk",
                "counterfactual"
            ]
        );
        assert_eq!(wit_world_exports("plain"), ["episode"]);
        for interface in interfaces {
            let functions = wit_functions(interface);
            assert!(!functions.is_empty(), "{interface}");
            for function in functions {
                assert!(
                    function
                        .signature
                        .starts_with(&format!("{}: func(", function.name)),
                    "{function:?}"
                );
                assert!(
                    checker(interface, &function.name).is_some(),
                    "no type check for {interface}.{}",
                    function.name
                );
                assert!(!function.signature.contains("  "), "{function:?}");
            }
            assert!(set_protocol(&mut Protocols::default(), interface));
        }
        assert_eq!(
            wit_functions("replay")[0].signature,
            "capture-replay-state: func(request: capture-request) -> result<state-lease, adapter-error>"
        );
        assert_eq!(protocol_of("episode-groups"), "recoverable-v0");
        assert_eq!(
            contract_interface("sandloop:adapter/episode@0.2.0"),
            Some("episode")
        );
        assert_eq!(contract_interface("sandloop:adapter/episode@0.0.9"), None);
    }
}
