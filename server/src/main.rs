//! The `content-server` binary: fault-injection setup (FAILPOINTS, with the `failpoints`
//! feature) around the command line in [`content_server::cli`]. Nothing else may live here.

use std::process::ExitCode;

fn main() -> ExitCode {
    let scenario = fail::FailScenario::setup();
    let code = content_server::cli::main();
    scenario.teardown();
    code
}
