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
    let report = check_contract(&[fitting("episode"), fitting("replay"), fitting("child-risk")]);
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
        seeds_only.problems[0]
            .message
            .contains("exports `seeds` and `variants` but neither `episode` nor `episode-groups`"),
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
        Some("list-seed-items: func(arm: string, epoch: u32) -> result<list<json>, adapter-error>")
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
