//! `lockstep bench -d N` (llama-bench's depth): each test starts from N tokens of context and
//! says so in its name and in the JSON (the context must fit the engine: 192 + 4 tokens here).

use std::process::Command;

fn bench_json(depth: &str) -> serde_json::Value {
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/tiny-llama/tiny-llama-Q4_K.gguf"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args([
            "bench",
            "-m",
            model,
            "--backend",
            "ref",
            "-p",
            "4",
            "-n",
            "4",
            "-d",
            depth,
            "-r",
            "2",
            "--json",
        ])
        .output()
        .expect("run lockstep");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("bench --json prints JSON")
}

#[test]
fn tests_at_a_depth_are_named_and_run_there() {
    let v = bench_json("192");
    assert_eq!(v["depth"], 192);
    let names: Vec<&str> = v["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .map(|t| t["test"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["pp4 @ d192", "tg4 @ d192"]);
    let flat = bench_json("0");
    assert_eq!(flat["tests"][1]["test"], "tg4");
}
