//! Raw wit-bindgen output, generated once per interface.
//!
//! wit-bindgen names the per-interface export macros after the interface
//! (`__export_sandloop_adapter_episode_0_1_0_cabi`) and exports them at the
//! crate root, so two worlds exporting the same interface cannot both be
//! generated in one crate. Instead every exported interface is generated
//! exactly once, inside a one-interface world written inline below, and the
//! worlds of `wit/adapter.wit` are composed from them by the macros in
//! [`crate::worlds`]: the component's type is the union of the type sections
//! each export macro links in, which is exactly the chosen world.
//!
//! The imported interfaces (`types`, `log`, `trace`) are generated once in
//! [`imports`] and shared by the export interfaces through `with`: the
//! shared protocol values (`fidelity`, `restore-receipt`,
//! `equivalence-check`, `equivalence-report`, ...) live in `types`, so
//! `replay::Fidelity` and `replay_children::Fidelity` are both
//! re-exports of `imports::sandloop::adapter::types::Fidelity`.

/// `types`, `log` and `trace`: the imports every world has.
pub mod imports {
    wit_bindgen::generate!({
        path: "../wit",
        inline: "
            package sandloop:guest-imports@0.1.0;
            world imports {
                import sandloop:adapter/types@0.2.0;
                import sandloop:adapter/log@0.2.0;
                import sandloop:adapter/trace@0.2.0;
            }
        ",
        world: "sandloop:guest-imports/imports@0.1.0",
        generate_all,
    });
}

macro_rules! export_interface {
    ($(#[$doc:meta])* $module:ident, $inline:literal, $world:literal, $macro_lit:literal, $bindings:literal) => {
        $(#[$doc])*
        pub mod $module {
            wit_bindgen::generate!({
                path: "../wit",
                inline: $inline,
                world: $world,
                pub_export_macro: true,
                export_macro_name: $macro_lit,
                default_bindings_module: $bindings,
                with: {
                    "sandloop:adapter/types@0.2.0": crate::bindings::imports::sandloop::adapter::types,
                },
            });
        }
    };
}

export_interface!(
    /// The `episode` export.
    episode,
    "package sandloop:guest-episode@0.1.0;
     world export-episode { export sandloop:adapter/episode@0.2.0; }",
    "sandloop:guest-episode/export-episode@0.1.0",
    "__sandloop_export_episode",
    "sandloop_guest::bindings::episode"
);
export_interface!(
    /// The `seeds` export.
    seeds,
    "package sandloop:guest-seeds@0.1.0;
     world export-seeds { export sandloop:adapter/seeds@0.2.0; }",
    "sandloop:guest-seeds/export-seeds@0.1.0",
    "__sandloop_export_seeds",
    "sandloop_guest::bindings::seeds"
);
export_interface!(
    /// The `variants` export.
    variants,
    "package sandloop:guest-variants@0.1.0;
     world export-variants { export sandloop:adapter/variants@0.2.0; }",
    "sandloop:guest-variants/export-variants@0.1.0",
    "__sandloop_export_variants",
    "sandloop_guest::bindings::variants"
);
export_interface!(
    /// The `episode-groups` export.
    episode_groups,
    "package sandloop:guest-episode-groups@0.1.0;
     world export-episode-groups { export sandloop:adapter/episode-groups@0.2.0; }",
    "sandloop:guest-episode-groups/export-episode-groups@0.1.0",
    "__sandloop_export_episode_groups",
    "sandloop_guest::bindings::episode_groups"
);
export_interface!(
    /// The `replay` export.
    replay,
    "package sandloop:guest-replay@0.1.0;
     world export-replay { export sandloop:adapter/replay@0.2.0; }",
    "sandloop:guest-replay/export-replay@0.1.0",
    "__sandloop_export_replay",
    "sandloop_guest::bindings::replay"
);
export_interface!(
    /// The `replay-children` export.
    replay_children,
    "package sandloop:guest-replay-children@0.1.0;
     world export-replay-children { export sandloop:adapter/replay-children@0.2.0; }",
    "sandloop:guest-replay-children/export-replay-children@0.1.0",
    "__sandloop_export_replay_children",
    "sandloop_guest::bindings::replay_children"
);
export_interface!(
    /// The `counterfactual` export.
    counterfactual,
    "package sandloop:guest-counterfactual@0.1.0;
     world export-counterfactual { export sandloop:adapter/counterfactual@0.2.0; }",
    "sandloop:guest-counterfactual/export-counterfactual@0.1.0",
    "__sandloop_export_counterfactual",
    "sandloop_guest::bindings::counterfactual"
);
export_interface!(
    /// The `child-risk` export.
    child_risk,
    "package sandloop:guest-child-risk@0.1.0;
     world export-child-risk { export sandloop:adapter/child-risk@0.2.0; }",
    "sandloop:guest-child-risk/export-child-risk@0.1.0",
    "__sandloop_export_child_risk",
    "sandloop_guest::bindings::child_risk"
);
