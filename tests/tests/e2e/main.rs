//! End-to-end tests: the example components, built for `wasm32-wasip2` by
//! this package's build script, driven through the real `sandloop` binary.

mod c_zig;
mod children;
mod cli_errors;
mod cli_output;
mod conformance;
mod counterfactual;
mod distributed;
mod host_resources;
mod hostile;
mod llm_loop;
mod loop_network;
mod loops;
mod loops_child_crashes;
mod loops_loopy_worker;
mod manual;
mod new_adapter;
mod replay;
mod report;
mod resume;
mod run;
mod snapshot;
mod support;
