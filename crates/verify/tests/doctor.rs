//! `lockstep doctor` on the real models and on corrupted copies of them: a zeroed embedding,
//! NaN in a layer, a truncated file, inconsistent metadata, zeroed rows of normal tokens.

use std::path::{Path, PathBuf};

use lockstep_gguf::GgufFile;
use lockstep_verify::doctor::{doctor, DoctorOptions, DoctorReport, Status};

fn model_path(name: &str) -> PathBuf {
    lockstep_fetch::resolve_model(name, None).unwrap_or_else(|e| {
        panic!("model {name} is not available ({e}); run `lockstep fetch {name}`")
    })
}

fn no_gen() -> DoctorOptions {
    DoctorOptions {
        gen_tokens: 0,
        ..DoctorOptions::default()
    }
}

/// Writes a corrupted copy of `src`, examines it, deletes it.
fn corrupted(src: &Path, tag: &str, f: impl FnOnce(&GgufFile, &mut Vec<u8>)) -> DoctorReport {
    let file = GgufFile::open(src).expect("open");
    let mut bytes = file.bytes().to_vec();
    f(&file, &mut bytes);
    let dir = std::env::temp_dir().join(format!("lockstep-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let p = dir.join(format!("{tag}.gguf"));
    std::fs::write(&p, &bytes).expect("write copy");
    drop(bytes);
    let r = doctor(&p, &no_gen());
    let _ = std::fs::remove_file(&p);
    eprintln!("--- {tag}\n{}", r.render());
    r
}

fn has(r: &DoctorReport, status: Status, needle: &str) -> bool {
    r.findings
        .iter()
        .any(|f| f.status == status && f.message.contains(needle))
}

fn range(file: &GgufFile, name: &str) -> std::ops::Range<usize> {
    let t = file
        .header()
        .tensor(name)
        .unwrap_or_else(|| panic!("{name}"));
    file.header().tensor_range(t)
}

/// Rewrites the u32/u64 value of metadata key `key` in place.
fn patch_u_key(bytes: &mut [u8], key: &str, value: u64) {
    let mut needle = (key.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(key.as_bytes());
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .unwrap_or_else(|| panic!("key {key} not found"));
    let ty_at = at + needle.len();
    let ty = u32::from_le_bytes(bytes[ty_at..ty_at + 4].try_into().expect("4 bytes"));
    let v = ty_at + 4;
    match ty {
        4 | 5 => bytes[v..v + 4].copy_from_slice(&(value as u32).to_le_bytes()),
        10 | 11 => bytes[v..v + 8].copy_from_slice(&value.to_le_bytes()),
        other => panic!("{key} has type {other}"),
    }
}

fn check_model(name: &str) {
    let path = model_path(name);
    let file = GgufFile::open(&path).expect("open");
    let arch = file
        .metadata()
        .get_str("general.architecture")
        .expect("arch")
        .to_string();
    let heads = file
        .metadata()
        .get_u64(&format!("{arch}.attention.head_count"))
        .expect("heads");

    // The real model: PASS, generation included.
    let clean = doctor(&path, &DoctorOptions::default());
    eprintln!("--- clean\n{}", clean.render());
    assert_eq!(
        clean.status(),
        Status::Pass,
        "{name}: clean model must pass"
    );

    // 1. Zeroed embedding table.
    let r = corrupted(&path, &format!("{name}-zero-embd"), |f, b| {
        let rg = range(f, "token_embd.weight");
        b[rg].fill(0);
    });
    assert_eq!(r.status(), Status::Fail);
    assert!(
        has(&r, Status::Fail, "token_embd.weight: all"),
        "{name}: zeroed embedding"
    );

    // 2. NaN in one layer's norm weight.
    let r = corrupted(&path, &format!("{name}-nan"), |f, b| {
        let rg = range(f, "blk.3.attn_norm.weight");
        for i in (rg.start..rg.start + 40).step_by(4) {
            b[i..i + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        }
    });
    assert_eq!(r.status(), Status::Fail);
    assert!(
        has(&r, Status::Fail, "blk.3.attn_norm.weight: 10 NaN"),
        "{name}: NaN in layer 3"
    );

    // 3. Truncated file.
    let r = corrupted(&path, &format!("{name}-truncated"), |_, b| {
        let n = b.len() / 2;
        b.truncate(n);
    });
    assert_eq!(r.status(), Status::Fail);
    assert!(
        has(&r, Status::Fail, "not a valid GGUF file"),
        "{name}: truncated"
    );

    // 4. Inconsistent metadata: a head count that contradicts the tensors.
    let r = corrupted(&path, &format!("{name}-heads"), |_, b| {
        patch_u_key(b, &format!("{arch}.attention.head_count"), heads + 2);
    });
    assert_eq!(r.status(), Status::Fail, "{name}: head count");
    assert!(
        r.findings
            .iter()
            .any(|f| f.section == "metadata" && f.status == Status::Fail),
        "{name}: the metadata section must fail"
    );

    // 5. Normal tokens with zeroed embedding rows: a warning naming the ids.
    let r = corrupted(&path, &format!("{name}-zero-rows"), |f, b| {
        let t = f.header().tensor("token_embd.weight").expect("embd");
        let row_bytes = t.size as usize / t.n_rows() as usize;
        let start = f.header().tensor_range(t).start;
        for id in 1000..1100 {
            b[start + id * row_bytes..start + (id + 1) * row_bytes].fill(0);
        }
    });
    assert_eq!(r.status(), Status::Warn, "{name}: zeroed rows");
    assert!(has(
        &r,
        Status::Warn,
        "NORMAL tokens have all-zero embeddings (ids 1000, 1001"
    ));
}

#[test]
fn doctor_smollm2() {
    check_model("smollm2");
}

#[test]
fn doctor_gemma3() {
    check_model("gemma3");
}
