//! Type-checking the functions of an exported contract interface against
//! the host's bindings of `wit/adapter.wit`, one function at a time, with
//! the check wasmtime makes when an instance is bound — so a mistyped
//! function is named with wasmtime's reason instead of failing the whole
//! interface.

use wasmtime::component::types::{self, ComponentFunc};
use wasmtime::component::{ComponentNamedList, Lift, Lower, TypedFunc};

use crate::bindings::exports::sandloop::adapter::{
    child_risk, counterfactual, episode, episode_groups, replay, replay_children, seeds, variants,
};

/// Type-checks one exported function (a function type of the given
/// component) against the host's binding of it.
pub(crate) type Checker = fn(&types::Component, &ComponentFunc) -> Result<(), String>;

/// wasmtime's type check of `func`, a function type of `component`, against
/// the Rust parameter and result types `P` and `R`: exactly the check
/// `Instance::get_typed_func::<P, R>` and the bindings' `GuestIndices::new`
/// make.
///
/// The one use of wasmtime's `#[doc(hidden)]` API in the sandbox, kept here
/// on purpose: wasmtime 48 has no public way to check a function *type*
/// against Rust types without instantiating the component
/// (`Instance::get_typed_func` needs a store and a running instance; the
/// public `types::ComponentFunc` only lists parameters and results, and a
/// structural comparison of those with the WIT would be a second type
/// checker that can disagree with the one that binds the instance).
/// `ComponentFunc::typecheck` and `types::Component::instance_type` are what
/// wasmtime's own `bindgen!` output calls in every `GuestIndices::new` of
/// [`crate::bindings`], so they change only together with the generated
/// bindings; the test `the_hidden_type_check_accepts_and_refuses_like_wasmtime_48`
/// fails if their meaning changes on a wasmtime upgrade.
fn wasmtime_typecheck<P, R>(
    component: &types::Component,
    func: &ComponentFunc,
) -> Result<(), String>
where
    P: ComponentNamedList + Lower,
    R: ComponentNamedList + Lift,
{
    func.typecheck::<P, R>(&component.instance_type())
        .map_err(|error| format!("type check: {error:#}"))
}

/// Type-check `func` as the host will call it: with the parameter and result
/// types of the binding's typed function (`witness`, e.g.
/// `episode::Guest::func_execute`).
fn fits<G, P, R>(
    component: &types::Component,
    func: &ComponentFunc,
    _witness: fn(&'static G) -> TypedFunc<P, R>,
) -> Result<(), String>
where
    P: ComponentNamedList + Lower,
    R: ComponentNamedList + Lift,
{
    wasmtime_typecheck::<P, R>(component, func)
}

/// The checker of `function` in contract interface `interface`; `None` for
/// a name the contract does not have.
pub(crate) fn checker(interface: &str, function: &str) -> Option<Checker> {
    Some(match (interface, function) {
        ("episode", "execute") => |c, f| fits(c, f, episode::Guest::func_execute),
        ("seeds", "list-seed-items") => |c, f| fits(c, f, seeds::Guest::func_list_seed_items),
        ("variants", "compile-variant") => |c, f| fits(c, f, variants::Guest::func_compile_variant),
        ("episode-groups", "prepare-episode-group") => {
            |c, f| fits(c, f, episode_groups::Guest::func_prepare_episode_group)
        }
        ("episode-groups", "execute-episode") => {
            |c, f| fits(c, f, episode_groups::Guest::func_execute_episode)
        }
        ("episode-groups", "release-episode-group") => {
            |c, f| fits(c, f, episode_groups::Guest::func_release_episode_group)
        }
        ("replay", "capture-replay-state") => {
            |c, f| fits(c, f, replay::Guest::func_capture_replay_state)
        }
        ("replay", "restore-replay-state") => {
            |c, f| fits(c, f, replay::Guest::func_restore_replay_state)
        }
        ("replay", "validate-replay-equivalence") => {
            |c, f| fits(c, f, replay::Guest::func_validate_replay_equivalence)
        }
        ("replay", "run-replay-suffix") => |c, f| fits(c, f, replay::Guest::func_run_replay_suffix),
        ("replay", "finalize-replay-suffix") => {
            |c, f| fits(c, f, replay::Guest::func_finalize_replay_suffix)
        }
        ("replay", "release-replay-state") => {
            |c, f| fits(c, f, replay::Guest::func_release_replay_state)
        }
        ("replay", "export-replay-state") => {
            |c, f| fits(c, f, replay::Guest::func_export_replay_state)
        }
        ("replay", "import-replay-state") => {
            |c, f| fits(c, f, replay::Guest::func_import_replay_state)
        }
        ("replay", "binding-token") => |c, f| fits(c, f, replay::Guest::func_binding_token),
        ("replay", "resume-binding") => |c, f| fits(c, f, replay::Guest::func_resume_binding),
        ("replay-children", "fork-replay-child") => {
            |c, f| fits(c, f, replay_children::Guest::func_fork_replay_child)
        }
        ("replay-children", "validate-replay-child-equivalence") => |c, f| {
            fits(
                c,
                f,
                replay_children::Guest::func_validate_replay_child_equivalence,
            )
        },
        ("replay-children", "run-replay-child") => {
            |c, f| fits(c, f, replay_children::Guest::func_run_replay_child)
        }
        ("replay-children", "release-replay-child") => {
            |c, f| fits(c, f, replay_children::Guest::func_release_replay_child)
        }
        ("child-risk", "assess-replay-child-intent") => {
            |c, f| fits(c, f, child_risk::Guest::func_assess_replay_child_intent)
        }
        ("child-risk", "assess-replay-child-outcome") => {
            |c, f| fits(c, f, child_risk::Guest::func_assess_replay_child_outcome)
        }
        ("counterfactual", "run-counterfactual") => {
            |c, f| fits(c, f, counterfactual::Guest::func_run_counterfactual)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_encoder::{
        CodeSection, ComponentBuilder, ComponentExportKind, ExportKind, ExportSection, Function,
        FunctionSection, Instruction, Module, PrimitiveValType, TypeSection, ValType,
    };
    use wasmtime::component::types::ComponentItem;

    /// A component exporting `f: func(a: u32) -> u32` at its top level,
    /// compiled, with the type of `f`.
    fn u32_function() -> (types::Component, ComponentFunc) {
        let mut module = Module::new();
        let mut signatures = TypeSection::new();
        signatures.ty().function([ValType::I32], [ValType::I32]);
        module.section(&signatures);
        let mut functions = FunctionSection::new();
        functions.function(0);
        module.section(&functions);
        let mut exports = ExportSection::new();
        exports.export("f", ExportKind::Func, 0);
        module.section(&exports);
        let mut code = CodeSection::new();
        let mut body = Function::new([]);
        body.instruction(&Instruction::LocalGet(0));
        body.instruction(&Instruction::End);
        code.function(&body);
        module.section(&code);

        let mut builder = ComponentBuilder::default();
        let module = builder.core_module(None, &module);
        let instance = builder.core_instantiate(None, module, []);
        let core = builder.core_alias_export(None, instance, "f", ExportKind::Func);
        let (ty, mut encoder) = builder.type_function(None);
        encoder
            .params([("a", PrimitiveValType::U32)])
            .result(Some(PrimitiveValType::U32.into()));
        let lifted = builder.lift_func(None, core, ty, []);
        builder.export("f", ComponentExportKind::Func, lifted, None);

        let engine = wasmtime::Engine::default();
        let component = wasmtime::component::Component::new(&engine, builder.finish())
            .expect("the probe component compiles");
        let ty = component.component_type();
        let func = match ty.get_export(&engine, "f").map(|export| export.ty) {
            Some(ComponentItem::ComponentFunc(func)) => func,
            other => panic!("`f` is not a function: {other:?}"),
        };
        (ty, func)
    }

    #[test]
    fn the_hidden_type_check_accepts_and_refuses_like_wasmtime_48() {
        let (component, func) = u32_function();
        assert_eq!(
            wasmtime_typecheck::<(u32,), (u32,)>(&component, &func),
            Ok(())
        );
        let two = wasmtime_typecheck::<(u32, u32), (u32,)>(&component, &func).unwrap_err();
        assert!(two.contains("expected 2-tuple, found 1-tuple"), "{two}");
        let string = wasmtime_typecheck::<(String,), (u32,)>(&component, &func).unwrap_err();
        assert!(string.starts_with("type check: "), "{string}");
        assert!(string.contains("string"), "{string}");
        let result = wasmtime_typecheck::<(u32,), (String,)>(&component, &func);
        assert!(result.is_err(), "the result type is checked too");
    }

    #[test]
    fn a_contract_function_refuses_another_shape() {
        let (component, func) = u32_function();
        let execute = checker("episode", "execute").expect("a checker for execute");
        let why = execute(&component, &func).unwrap_err();
        assert!(why.contains("expected 2-tuple, found 1-tuple"), "{why}");
        assert!(checker("episode", "run").is_none());
    }
}
