//! Writing types out as WIT, for the contract check's messages and
//! `sandloop inspect`: a component's function types as wasmtime reads them
//! (what an adapter *found*), and the contract's functions as `wit-parser`
//! resolves `wit/adapter.wit` (what the host *expects*).

use wasmtime::component::Type;
use wasmtime::component::types::ComponentFunc;
use wit_parser::{Handle, Resolve, TypeDefKind, TypeId};

/// A function declaration: `name: func(params) -> result`, `async func`
/// when `is_async`; several results are shown as one tuple.
fn declaration(name: &str, is_async: bool, params: &[String], results: &[String]) -> String {
    let keyword = if is_async { "async func" } else { "func" };
    let mut text = format!("{name}: {keyword}({})", params.join(", "));
    match results {
        [] => {}
        [one] => text.push_str(&format!(" -> {one}")),
        many => text.push_str(&format!(" -> tuple<{}>", many.join(", "))),
    }
    text
}

/// `result`, `result<ok>`, `result<_, err>` or `result<ok, err>`.
fn result_type(ok: Option<String>, err: Option<String>) -> String {
    match (ok, err) {
        (None, None) => "result".into(),
        (Some(ok), None) => format!("result<{ok}>"),
        (None, Some(err)) => format!("result<_, {err}>"),
        (Some(ok), Some(err)) => format!("result<{ok}, {err}>"),
    }
}

/// Render a component function's type as a WIT declaration named `name`.
pub(crate) fn wit_function(name: &str, func: &ComponentFunc) -> String {
    let params: Vec<String> = func
        .params()
        .map(|(param, ty)| format!("{param}: {}", wit_type(&ty)))
        .collect();
    let results: Vec<String> = func.results().map(|ty| wit_type(&ty)).collect();
    declaration(name, func.async_(), &params, &results)
}

/// Render a component type as WIT. Named types appear by their structure
/// (a component does not carry the names of its records), resources as
/// `resource`.
pub(crate) fn wit_type(ty: &Type) -> String {
    let list = |items: Vec<String>| items.join(", ");
    match ty {
        Type::Bool => "bool".into(),
        Type::S8 => "s8".into(),
        Type::U8 => "u8".into(),
        Type::S16 => "s16".into(),
        Type::U16 => "u16".into(),
        Type::S32 => "s32".into(),
        Type::U32 => "u32".into(),
        Type::S64 => "s64".into(),
        Type::U64 => "u64".into(),
        Type::Float32 => "f32".into(),
        Type::Float64 => "f64".into(),
        Type::Char => "char".into(),
        Type::String => "string".into(),
        Type::List(inner) => format!("list<{}>", wit_type(&inner.ty())),
        Type::FixedLengthList(inner) => format!("list<{}, {}>", wit_type(&inner.ty()), inner.len()),
        Type::Map(map) => format!("map<{}, {}>", wit_type(&map.key()), wit_type(&map.value())),
        Type::Record(record) => format!(
            "record {{ {} }}",
            list(
                record
                    .fields()
                    .map(|field| format!("{}: {}", field.name, wit_type(&field.ty)))
                    .collect()
            )
        ),
        Type::Tuple(tuple) => format!(
            "tuple<{}>",
            list(tuple.types().map(|t| wit_type(&t)).collect())
        ),
        Type::Variant(variant) => format!(
            "variant {{ {} }}",
            list(
                variant
                    .cases()
                    .map(|case| match &case.ty {
                        Some(ty) => format!("{}({})", case.name, wit_type(ty)),
                        None => case.name.to_string(),
                    })
                    .collect()
            )
        ),
        Type::Enum(names) => format!(
            "enum {{ {} }}",
            list(names.names().map(str::to_string).collect())
        ),
        Type::Flags(names) => format!(
            "flags {{ {} }}",
            list(names.names().map(str::to_string).collect())
        ),
        Type::Option(inner) => format!("option<{}>", wit_type(&inner.ty())),
        Type::Result(result) => result_type(
            result.ok().map(|ok| wit_type(&ok)),
            result.err().map(|err| wit_type(&err)),
        ),
        Type::Own(_) => "resource".into(),
        Type::Borrow(_) => "borrow<resource>".into(),
        Type::Future(inner) => match inner.ty() {
            Some(ty) => format!("future<{}>", wit_type(&ty)),
            None => "future".into(),
        },
        Type::Stream(inner) => match inner.ty() {
            Some(ty) => format!("stream<{}>", wit_type(&ty)),
            None => "stream".into(),
        },
        Type::ErrorContext => "error-context".into(),
    }
}

/// Render a function of a resolved WIT package as declared there
/// (`execute: func(item: json, ctx: context) -> result<json, adapter-error>`):
/// named types by their names, whitespace as `wit-parser` leaves none.
pub(crate) fn declared_function(resolve: &Resolve, function: &wit_parser::Function) -> String {
    let params: Vec<String> = function
        .params
        .iter()
        .map(|param| format!("{}: {}", param.name, declared_type(resolve, &param.ty)))
        .collect();
    let results: Vec<String> = function
        .result
        .iter()
        .map(|ty| declared_type(resolve, ty))
        .collect();
    declaration(&function.name, function.kind.is_async(), &params, &results)
}

/// Render a type of a resolved WIT package as it is written there.
fn declared_type(resolve: &Resolve, ty: &wit_parser::Type) -> String {
    use wit_parser::Type as Wit;
    match ty {
        Wit::Bool => "bool".into(),
        Wit::U8 => "u8".into(),
        Wit::U16 => "u16".into(),
        Wit::U32 => "u32".into(),
        Wit::U64 => "u64".into(),
        Wit::S8 => "s8".into(),
        Wit::S16 => "s16".into(),
        Wit::S32 => "s32".into(),
        Wit::S64 => "s64".into(),
        Wit::F32 => "f32".into(),
        Wit::F64 => "f64".into(),
        Wit::Char => "char".into(),
        Wit::String => "string".into(),
        Wit::ErrorContext => "error-context".into(),
        Wit::Id(id) => declared_type_def(resolve, *id),
    }
}

/// Render type definition `id`: its name when it has one (records, enums,
/// resources, aliases such as `json`), else its structure (`list<u8>`,
/// `borrow<replay-binding>`; an owned handle is its resource's name).
fn declared_type_def(resolve: &Resolve, id: TypeId) -> String {
    let def = &resolve.types[id];
    if let Some(name) = &def.name {
        return name.clone();
    }
    let ty = |ty: &wit_parser::Type| declared_type(resolve, ty);
    match &def.kind {
        TypeDefKind::Option(inner) => format!("option<{}>", ty(inner)),
        TypeDefKind::Result(result) => {
            result_type(result.ok.as_ref().map(ty), result.err.as_ref().map(ty))
        }
        TypeDefKind::List(inner) => format!("list<{}>", ty(inner)),
        TypeDefKind::FixedLengthList(inner, len) => format!("list<{}, {len}>", ty(inner)),
        TypeDefKind::Map(key, value) => format!("map<{}, {}>", ty(key), ty(value)),
        TypeDefKind::Tuple(tuple) => format!(
            "tuple<{}>",
            tuple.types.iter().map(ty).collect::<Vec<_>>().join(", ")
        ),
        TypeDefKind::Handle(Handle::Own(resource)) => declared_type_def(resolve, *resource),
        TypeDefKind::Handle(Handle::Borrow(resource)) => {
            format!("borrow<{}>", declared_type_def(resolve, *resource))
        }
        TypeDefKind::Future(inner) => match inner {
            Some(inner) => format!("future<{}>", ty(inner)),
            None => "future".into(),
        },
        TypeDefKind::Stream(inner) => match inner {
            Some(inner) => format!("stream<{}>", ty(inner)),
            None => "stream".into(),
        },
        TypeDefKind::Type(inner) => ty(inner),
        // Always named in a resolved package.
        other @ (TypeDefKind::Record(_)
        | TypeDefKind::Resource
        | TypeDefKind::Flags(_)
        | TypeDefKind::Variant(_)
        | TypeDefKind::Enum(_)
        | TypeDefKind::Unknown) => other.as_str().into(),
    }
}
