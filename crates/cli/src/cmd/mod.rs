//! One module per subcommand.

pub mod bench;
pub mod check;
pub mod diff;
pub mod diff_foreign;
pub mod doctor;
pub mod fetch;
pub mod inspect;
pub mod isolate;
pub mod run;
pub mod serve;
pub mod synth;
pub mod tokenize;
pub mod trace;
