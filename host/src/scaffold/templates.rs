//! The project templates of `sandloop new adapter`, one per language,
//! embedded from `host/templates/adapter/` and `guest-sdk/c/`.

use super::{Lang, Template, TemplateFile};

/// The file `WORLD` + `suffix` of guest-sdk/c/bindings/WORLD/ as
/// `bindings/WORLD` + `suffix` (`.h`, `.c`, `_component_type.c`).
macro_rules! c_bindings {
    ($world:literal, $suffix:literal) => {
        (
            concat!("bindings/", $world, $suffix),
            include_str!(concat!(
                "../../../guest-sdk/c/bindings/",
                $world,
                "/",
                $world,
                $suffix
            )),
        )
    };
}

/// The templates, one entry per language (see
/// `host/templates/adapter/README-for-cli.md` for the Python and JavaScript
/// ones). A language whose `files` is empty is not available yet.
pub const TEMPLATES: &[Template] = &[
    Template {
        lang: Lang::Rust,
        files: &[
            (
                "Cargo.toml",
                include_str!("../../templates/adapter/rust/Cargo.toml.tmpl"),
            ),
            (
                "src/lib.rs",
                include_str!("../../templates/adapter/rust/src/lib.rs"),
            ),
            (
                "README.md",
                include_str!("../../templates/adapter/rust/README.md"),
            ),
            (
                ".gitignore",
                include_str!("../../templates/adapter/rust/gitignore.tmpl"),
            ),
        ],
        shared: &[ITEMS_JSONL],
        setup: &["rustup target add wasm32-wasip2"],
        build: &["cargo build --release --target wasm32-wasip2"],
        component: "target/wasm32-wasip2/release/{{crate}}.wasm",
        items: "items.jsonl",
    },
    Template {
        lang: Lang::Python,
        files: &[
            (
                "app.py",
                include_str!("../../templates/adapter/python/app.py"),
            ),
            (
                "build.sh",
                include_str!("../../templates/adapter/python/build.sh"),
            ),
            (
                "requirements.txt",
                include_str!("../../templates/adapter/python/requirements.txt"),
            ),
            (
                "README.md",
                include_str!("../../templates/adapter/python/README.md"),
            ),
            (
                ".gitignore",
                include_str!("../../templates/adapter/python/gitignore.tmpl"),
            ),
        ],
        shared: &[ITEMS_JSONL],
        setup: &["python3 -m venv .venv && .venv/bin/pip install -r requirements.txt"],
        build: &["./build.sh"],
        component: "{{name}}.wasm",
        items: "items.jsonl",
    },
    Template {
        lang: Lang::Js,
        files: &[
            (
                "adapter.js",
                include_str!("../../templates/adapter/js/adapter.js"),
            ),
            (
                "build.sh",
                include_str!("../../templates/adapter/js/build.sh"),
            ),
            (
                "package.json",
                include_str!("../../templates/adapter/js/package.json.tmpl"),
            ),
            (
                "package-lock.json",
                include_str!("../../templates/adapter/js/package-lock.json.tmpl"),
            ),
            (
                "README.md",
                include_str!("../../templates/adapter/js/README.md"),
            ),
            (
                ".gitignore",
                include_str!("../../templates/adapter/js/gitignore.tmpl"),
            ),
        ],
        shared: &[ITEMS_JSONL],
        setup: &["npm ci"],
        build: &["./build.sh"],
        component: "{{name}}.wasm",
        items: "items.jsonl",
    },
    Template {
        lang: Lang::C,
        files: &[
            (
                "adapter.c",
                include_str!("../../templates/adapter/c/adapter.c"),
            ),
            (
                "build.sh",
                include_str!("../../templates/adapter/c/build.sh"),
            ),
            (
                "requirements.txt",
                include_str!("../../templates/adapter/c/requirements.txt"),
            ),
            (
                "README.md",
                include_str!("../../templates/adapter/c/README.md"),
            ),
        ],
        shared: PREVIEW1_PROJECT,
        setup: &[
            "sudo apt-get install -y clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc && ./setup.sh",
        ],
        build: &["./build.sh"],
        component: "{{name}}.wasm",
        items: "items.jsonl",
    },
    Template {
        lang: Lang::Zig,
        files: &[
            (
                "adapter.zig",
                include_str!("../../templates/adapter/zig/adapter.zig"),
            ),
            (
                "build.sh",
                include_str!("../../templates/adapter/zig/build.sh"),
            ),
            (
                "requirements.txt",
                include_str!("../../templates/adapter/zig/requirements.txt"),
            ),
            (
                "README.md",
                include_str!("../../templates/adapter/zig/README.md"),
            ),
        ],
        shared: PREVIEW1_PROJECT,
        setup: &["./setup.sh"],
        build: &["./build.sh"],
        component: "{{name}}.wasm",
        items: "items.jsonl",
    },
];

/// Every project's sample items.
const ITEMS_JSONL: TemplateFile = (
    "items.jsonl",
    include_str!("../../templates/adapter/items.jsonl"),
);

/// What the C and Zig projects share: guest-sdk/c in `sandloop/`, the C
/// bindings of worlds `plain`, `grouped` and `replayable`
/// (guest-sdk/c/bindings.sh) in `bindings/` (`WORLD` in `build.sh` picks
/// one), `setup.sh` (their pinned tools and the WASI reactor adapter), the
/// sample items and a `.gitignore` for their tools, components and runs.
const PREVIEW1_PROJECT: &[TemplateFile] = &[
    (
        "sandloop/sandloop.h",
        include_str!("../../../guest-sdk/c/sandloop.h"),
    ),
    (
        "sandloop/sandloop.c",
        include_str!("../../../guest-sdk/c/sandloop.c"),
    ),
    c_bindings!("plain", ".h"),
    c_bindings!("plain", ".c"),
    c_bindings!("plain", "_component_type.c"),
    c_bindings!("grouped", ".h"),
    c_bindings!("grouped", ".c"),
    c_bindings!("grouped", "_component_type.c"),
    c_bindings!("replayable", ".h"),
    c_bindings!("replayable", ".c"),
    c_bindings!("replayable", "_component_type.c"),
    ("setup.sh", include_str!("../../templates/adapter/setup.sh")),
    ITEMS_JSONL,
    (
        ".gitignore",
        include_str!("../../templates/adapter/preview1-gitignore.tmpl"),
    ),
];
