//! One test per rule of the manifest format (`spec/accelerator-manifest.md`).

use std::path::Path;
use std::sync::Arc;

use accel::{Accelerator, CallError, ParamType, ParamValue, PARAMS_LEN};

use super::*;

const XORBYTES: &str = r#"
name = "xorbytes"
id = 300
description = "XOR every byte with a key"

[[params]]
name = "key"
type = "u32"
offset = 0
default = 0
min = 0
max = 255

[payload]
multiple_of = 1
max_bytes = 16777216

[output]
bytes = "payload_len"

[opencl]
source = "xorbytes.cl"
build_options = ""
kernel = "xorbytes"
global_size = ["payload_len"]
local_size = []
args = ["payload", "output", "key", "payload_len"]

[rtl]
sources = ["xorbytes.v"]
top = "xorbytes"
cycles_max = "1000 + 4 * payload_len"
"#;

fn files(name: &str) -> Result<Vec<u8>, String> {
    match name {
        "xorbytes.cl" => Ok(b"kernel void xorbytes() {}".to_vec()),
        "xorbytes.v" => Ok(b"module xorbytes(); endmodule".to_vec()),
        "k.bin" => Ok(vec![0, 1, 2, 3]),
        "bad.cl" => Ok(vec![0xff, 0xfe]),
        "empty.cl" | "empty.bin" => Ok(Vec::new()),
        "nul.cl" => Ok(b"\0kernel void k() {}".to_vec()),
        other => Err(format!("no such file {other}")),
    }
}

fn parse_text(text: &str) -> Result<Manifest, ManifestError> {
    parse(Path::new("acc/xorbytes/accelerator.toml"), text, &files)
}

/// The error of `text`: asserts its field and that the reason contains `reason`.
fn refused(text: &str, field: &str, reason: &str) {
    let err = parse_text(text).expect_err(text);
    assert_eq!(err.field, field, "{err}");
    assert!(err.reason.contains(reason), "{err}");
    assert!(
        err.to_string()
            .starts_with("acc/xorbytes/accelerator.toml: "),
        "{err}"
    );
}

/// A minimal valid manifest with `extra` inserted before `[output]` (params) and
/// `opencl` as its `[opencl]` body.
fn with(params: &str, opencl: &str) -> String {
    format!("name = \"t\"\n{params}\n[output]\nbytes = \"payload_len\"\n[opencl]\n{opencl}\n")
}

const OCL: &str = "source = \"xorbytes.cl\"\nkernel = \"k\"\nglobal_size = [\"payload_len\"]\nargs = [\"payload\", \"output\"]";

#[test]
fn the_spec_example_parses_whole() {
    let m = parse_text(XORBYTES).unwrap();
    assert_eq!((m.name.as_str(), m.id), ("xorbytes", Some(300)));
    assert_eq!(m.description, "XOR every byte with a key");
    assert_eq!(m.params.len(), 1);
    let key = &m.params[0];
    assert_eq!(
        (key.name.as_ref(), key.ty, key.offset),
        ("key", ParamType::U32, 0)
    );
    assert_eq!(key.default, Some(ParamValue::U32(0)));
    assert_eq!(
        (key.min, key.max),
        (Some(ParamValue::U32(0)), Some(ParamValue::U32(255)))
    );
    assert_eq!(
        m.payload,
        Payload {
            multiple_of: 1,
            max_bytes: 16 << 20
        }
    );
    let o = m.opencl.as_ref().unwrap();
    assert_eq!(
        (o.kind, o.file.as_str(), o.kernel.as_str()),
        (ProgramKind::Source, "xorbytes.cl", "xorbytes")
    );
    assert_eq!(
        o.args,
        [Arg::Payload, Arg::Output, Arg::Param(0), Arg::PayloadLen]
    );
    assert_eq!(o.global_size.len(), 1);
    assert!(o.local_size.is_empty());
    let r = m.rtl.as_ref().unwrap();
    assert_eq!(
        (r.top.as_str(), r.sources[0].0.as_str()),
        ("xorbytes", "xorbytes.v")
    );
    let env = Env {
        payload_len: 10,
        output_len: None,
        params: &[Some(0)],
    };
    assert_eq!(r.cycles_max.eval(&env), Ok(1040));
    assert_eq!(m.backends(), ["opencl", "rtl"]);
    assert_eq!(m.dir, Path::new("acc/xorbytes"));
}

#[test]
fn names_ids_and_unknown_keys() {
    refused(
        &XORBYTES.replace("\"xorbytes\"\nid", "\"XorBytes\"\nid"),
        "name",
        "a-z, 0-9",
    );
    refused(
        &XORBYTES.replace(
            "name = \"xorbytes\"",
            &format!("name = \"{}\"", "a".repeat(33)),
        ),
        "name",
        "1 to 32",
    );
    refused(
        &XORBYTES.replace("id = 300", "id = 255"),
        "id",
        "outside 256..=65534",
    );
    refused(&XORBYTES.replace("id = 300", "id = 65535"), "id", "outside");
    assert_eq!(
        parse_text(&XORBYTES.replace("id = 300", "id = 65534"))
            .unwrap()
            .id,
        Some(65534)
    );
    assert_eq!(
        parse_text(&XORBYTES.replace("id = 300\n", "")).unwrap().id,
        None
    );
    let err = parse_text(&XORBYTES.replace("id = 300", "ids = 300")).unwrap_err();
    assert!(err.reason.contains("unknown field `ids`"), "{err}");
    assert_eq!(err.field, "ids");
    let err = parse_text("name = ").unwrap_err();
    assert!(err.field.starts_with("line"), "{err}");
    refused(
        &XORBYTES.replace("[output]\nbytes = \"payload_len\"\n", ""),
        "output",
        "missing field `output`",
    );
}

#[test]
fn every_param_type_and_its_alignment() {
    for (ty, size) in [
        ("u8", 1),
        ("u16", 2),
        ("u32", 4),
        ("i32", 4),
        ("u64", 8),
        ("f32", 4),
    ] {
        let ok = with(
            &format!(
                "[[params]]\nname = \"p\"\ntype = \"{ty}\"\noffset = {}",
                44 / size * size - size
            ),
            OCL,
        );
        let m = parse_text(&ok).unwrap_or_else(|e| panic!("{ty}: {e}"));
        assert_eq!(m.params[0].ty.size(), size);
        if size > 1 {
            let bad = with(
                &format!(
                    "[[params]]\nname = \"p\"\ntype = \"{ty}\"\noffset = {}",
                    size + 1
                ),
                OCL,
            );
            refused(&bad, "params[0].offset", "not aligned");
        }
        let outside = with(
            &format!("[[params]]\nname = \"p\"\ntype = \"{ty}\"\noffset = 44"),
            OCL,
        );
        refused(&outside, "params[0].offset", "does not fit the 44-byte");
    }
    refused(
        &with("[[params]]\nname = \"p\"\ntype = \"f64\"\noffset = 0", OCL),
        "params[0].type",
        "not one of",
    );
    refused(
        &with("[[params]]\nname = \"p\"\ntype = \"u8\"\noffset = -1", OCL),
        "params[0].offset",
        "does not fit",
    );
}

#[test]
fn params_must_not_overlap_or_repeat_or_shadow_the_language() {
    let two = |a: &str, b: &str| with(&format!("[[params]]\n{a}\n[[params]]\n{b}"), OCL);
    refused(
        &two(
            "name = \"a\"\ntype = \"u64\"\noffset = 8",
            "name = \"b\"\ntype = \"u16\"\noffset = 14",
        ),
        "params[1].offset",
        "overlaps params[0] `a`",
    );
    assert!(parse_text(&two(
        "name = \"a\"\ntype = \"u64\"\noffset = 8",
        "name = \"b\"\ntype = \"u16\"\noffset = 16"
    ))
    .is_ok());
    refused(
        &two(
            "name = \"a\"\ntype = \"u8\"\noffset = 0",
            "name = \"a\"\ntype = \"u8\"\noffset = 1",
        ),
        "params[1].name",
        "also the name of params[0]",
    );
    for reserved in ["payload_len", "output", "min", "ceil_div", "local"] {
        refused(
            &with(
                &format!("[[params]]\nname = \"{reserved}\"\ntype = \"u8\"\noffset = 0"),
                OCL,
            ),
            "params[0].name",
            "reserved",
        );
    }
    refused(
        &with("[[params]]\nname = \"1x\"\ntype = \"u8\"\noffset = 0", OCL),
        "params[0].name",
        "digit",
    );
}

#[test]
fn defaults_and_bounds_fit_the_type_and_each_other() {
    let p = |extra: &str, ty: &str| {
        with(
            &format!("[[params]]\nname = \"p\"\ntype = \"{ty}\"\noffset = 0\n{extra}"),
            OCL,
        )
    };
    refused(
        &p("default = 256", "u8"),
        "params[0].default",
        "not a value of type u8",
    );
    refused(
        &p("min = -1", "u32"),
        "params[0].min",
        "not a value of type u32",
    );
    refused(
        &p("max = 1.5", "i32"),
        "params[0].max",
        "not a value of type i32",
    );
    refused(
        &p("min = 5\nmax = 4", "i32"),
        "params[0].min",
        "greater than max",
    );
    refused(
        &p("min = 0\nmax = 4\ndefault = 5", "u16"),
        "params[0].default",
        "outside 0..=4",
    );
    refused(
        &p("default = \"x\"", "u8"),
        "params[0].default",
        "not a value",
    );
    let m = parse_text(&p("min = -1\nmax = 1.5\ndefault = 0", "f32")).unwrap();
    assert_eq!(m.params[0].max, Some(ParamValue::F32(1.5)));
    assert_eq!(m.params[0].min, Some(ParamValue::F32(-1.0)));
    let m = parse_text(&p("min = -5\ndefault = -5", "i32")).unwrap();
    assert_eq!(m.params[0].default, Some(ParamValue::I32(-5)));
}

#[test]
fn payload_rules() {
    refused(
        &XORBYTES.replace("multiple_of = 1", "multiple_of = 0"),
        "payload.multiple_of",
        "at least 1",
    );
    refused(
        &XORBYTES.replace("max_bytes = 16777216", "max_bytes = 4294967296"),
        "payload.max_bytes",
        "within",
    );
    let m = parse_text(&with("", OCL)).unwrap();
    assert_eq!(
        m.payload,
        Payload {
            multiple_of: 1,
            max_bytes: PAYLOAD_MAX_BYTES_DEFAULT
        }
    );
}

#[test]
fn expressions_name_only_what_they_may() {
    let out =
        |bytes: &str| XORBYTES.replace("bytes = \"payload_len\"", &format!("bytes = \"{bytes}\""));
    assert!(parse_text(&out("ceil_div(payload_len, 4) * 4 + key")).is_ok());
    refused(&out("output_len"), "output.bytes", "only in `args`");
    refused(&out("payload_len +"), "output.bytes", "expected a number");
    refused(&out("nokey"), "output.bytes", "unknown name `nokey`");
    assert!(parse_text(&XORBYTES.replace("bytes = \"payload_len\"", "bytes = 64")).is_ok());
    let f = with(
        "[[params]]\nname = \"g\"\ntype = \"f32\"\noffset = 0",
        &OCL.replace("[\"payload_len\"]", "[\"g\"]"),
    );
    refused(&f, "opencl.global_size[0]", "f32; sizes are integers");
    refused(
        &XORBYTES.replace(
            "cycles_max = \"1000 + 4 * payload_len\"",
            "cycles_max = \"output_len\"",
        ),
        "rtl.cycles_max",
        "only in `args`",
    );
}

#[test]
fn opencl_section_rules() {
    let o = |body: &str| with("[[params]]\nname = \"n\"\ntype = \"u32\"\noffset = 0", body);
    refused(
        &o("kernel = \"k\"\nglobal_size = [\"1\"]\nargs = []"),
        "opencl.source",
        "missing",
    );
    refused(
        &o(&format!("binary = \"k.bin\"\n{OCL}")),
        "opencl.binary",
        "not both",
    );
    refused(
        &o(&OCL.replace("xorbytes.cl", "missing.cl")),
        "opencl.source",
        "no such file missing.cl",
    );
    refused(
        &o(&OCL.replace("xorbytes.cl", "../other/x.cl")),
        "opencl.source",
        "inside the accelerator's folder",
    );
    refused(
        &o(&OCL.replace("xorbytes.cl", "/etc/passwd")),
        "opencl.source",
        "inside",
    );
    refused(
        &o(&OCL.replace("xorbytes.cl", "bad.cl")),
        "opencl.source",
        "not UTF-8",
    );
    for empty in ["empty.cl", "nul.cl"] {
        refused(
            &o(&OCL.replace("xorbytes.cl", empty)),
            "opencl.source",
            &format!("{empty} is empty"),
        );
    }
    refused(
        &o(&OCL.replace("source = \"xorbytes.cl\"", "binary = \"empty.bin\"")),
        "opencl.binary",
        "empty.bin is empty",
    );
    let m = parse_text(&o(
        &OCL.replace("source = \"xorbytes.cl\"", "binary = \"k.bin\"")
    ))
    .unwrap();
    let ocl = m.opencl.unwrap();
    assert_eq!(
        (ocl.kind, ocl.program),
        (ProgramKind::Binary, vec![0, 1, 2, 3])
    );
    refused(
        &o(&OCL.replace("kernel = \"k\"", "kernel = \"2k\"")),
        "opencl.kernel",
        "not an identifier",
    );
    refused(
        &o(&OCL.replace("[\"payload_len\"]", "[]")),
        "opencl.global_size",
        "give 1 to 3",
    );
    refused(
        &o(&OCL.replace("[\"payload_len\"]", "[\"1\",\"1\",\"1\",\"1\"]")),
        "opencl.global_size",
        "give 1 to 3",
    );
    refused(
        &o(&format!("{OCL}\nlocal_size = [\"1\", \"2\"]")),
        "opencl.local_size",
        "give as many",
    );
    assert!(parse_text(&o(&format!("{OCL}\nlocal_size = [\"min(64, n)\"]"))).is_ok());
    let args = |list: &str| o(&OCL.replace("[\"payload\", \"output\"]", list));
    let m = parse_text(&args(
        "[\"payload\", \"output\", \"n\", \"output_len\", \"local:4 * output_len\"]",
    ))
    .unwrap();
    let a = &m.opencl.unwrap().args;
    assert_eq!(a[2], Arg::Param(0));
    assert_eq!(a[3], Arg::OutputLen);
    assert!(matches!(&a[4], Arg::Local(e) if e.uses(Var::OutputLen)));
    refused(
        &args("[\"payload\", \"nope\"]"),
        "opencl.args[1]",
        "not payload, output",
    );
    refused(&args("[\"local:x\"]"), "opencl.args[0]", "unknown name `x`");
}

#[test]
fn rtl_section_rules_and_an_implementation_is_required() {
    let r = |body: &str| format!("name = \"t\"\n[output]\nbytes = \"payload_len\"\n[rtl]\n{body}");
    let ok = "sources = [\"xorbytes.v\"]\ntop = \"xorbytes\"\ncycles_max = \"100\"";
    let m = parse_text(&r(ok)).unwrap();
    assert_eq!(m.backends(), ["rtl"]);
    refused(
        &r(&ok.replace("[\"xorbytes.v\"]", "[]")),
        "rtl.sources",
        "give 1 to",
    );
    refused(
        &r(&ok.replace("xorbytes.v", "gone.v")),
        "rtl.sources[0]",
        "no such file",
    );
    refused(
        &r(&ok.replace("top = \"xorbytes\"", "top = \"a-b\"")),
        "rtl.top",
        "not an identifier",
    );
    refused(
        &r(&ok.replace("\ncycles_max = \"100\"", "")),
        "cycles_max",
        "missing field `cycles_max`",
    );
    refused(
        "name = \"t\"\n[output]\nbytes = \"1\"\n",
        "opencl",
        "no implementation",
    );
}

#[test]
fn the_hash_covers_the_manifest_and_every_implementation_file() {
    let a = parse_text(XORBYTES).unwrap().hash;
    assert_eq!(a.len(), 32);
    assert_eq!(parse_text(XORBYTES).unwrap().hash, a, "deterministic");
    assert_ne!(
        parse_text(&XORBYTES.replace("XOR every", "XOR each"))
            .unwrap()
            .hash,
        a
    );
    let other_source = |name: &str| match name {
        "xorbytes.cl" => Ok(b"kernel void xorbytes() { }".to_vec()),
        n => files(n),
    };
    let b = parse(Path::new("x/accelerator.toml"), XORBYTES, &other_source)
        .unwrap()
        .hash;
    assert_ne!(a, b, "the OpenCL source is covered");
    let other_rtl = |name: &str| match name {
        "xorbytes.v" => Ok(b"module xorbytes(); endmodule ".to_vec()),
        n => files(n),
    };
    let c = parse(Path::new("x/accelerator.toml"), XORBYTES, &other_rtl)
        .unwrap()
        .hash;
    assert_ne!(a, c, "the RTL sources are covered");
}

#[test]
fn the_catalog_entry_checks_params_payload_and_output_size() {
    let text = XORBYTES
        .replace("multiple_of = 1", "multiple_of = 4")
        .replace("max_bytes = 16777216", "max_bytes = 64")
        .replace(
            "bytes = \"payload_len\"",
            "bytes = \"payload_len - 8 * key\"",
        );
    let m = Arc::new(parse_text(&text).unwrap());
    let a = ManifestAccelerator::new(Arc::clone(&m), 300);
    assert_eq!(
        (a.descriptor().id, a.descriptor().name.as_str()),
        (300, "xorbytes")
    );
    assert_eq!(a.descriptor().hash, m.hash);
    let mut block = [0u8; PARAMS_LEN];
    a.check(&block, None).unwrap();
    a.check(&block, Some(64)).unwrap();
    let msg = |r: Result<(), CallError>| match r {
        Err(CallError::BadRequest(m)) => m,
        other => panic!("expected BadRequest, got {other:?}"),
    };
    assert!(msg(a.check(&block, Some(68))).contains("at most 64"));
    assert!(msg(a.check(&block, Some(6))).contains("not a multiple of 4"));
    m.params[0].write(&mut block, ParamValue::U32(256));
    assert!(msg(a.check(&block, None)).contains("outside 0..=255"));
    m.params[0].write(&mut block, ParamValue::U32(2));
    assert_eq!(a.output_len(&block, 32), Ok(16));
    assert!(msg(a.check(&block, Some(8))).contains("negative"));
    let mut out = vec![1];
    assert!(matches!(
        a.run(&block, b"", &mut out),
        Err(CallError::Internal(_))
    ));
    assert!(out.is_empty());
}

#[test]
fn load_dir_keeps_the_valid_and_names_the_refused() {
    let root = std::env::temp_dir().join(format!("manifest-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let write = |folder: &str, text: &str| {
        std::fs::create_dir_all(root.join(folder)).unwrap();
        std::fs::write(root.join(folder).join("accelerator.toml"), text).unwrap();
        std::fs::write(
            root.join(folder).join("xorbytes.cl"),
            "kernel void xorbytes() {}",
        )
        .unwrap();
        std::fs::write(
            root.join(folder).join("xorbytes.v"),
            "module xorbytes(); endmodule",
        )
        .unwrap();
    };
    write("a_good", XORBYTES);
    write("b_same_name", &XORBYTES.replace("id = 300", "id = 301"));
    write(
        "c_same_id",
        &XORBYTES.replace("name = \"xorbytes\"", "name = \"other\""),
    );
    write(
        "d_bad_offset",
        &XORBYTES
            .replace("name = \"xorbytes\"", "name = \"d\"")
            .replace("id = 300\n", "")
            .replace("offset = 0", "offset = 2"),
    );
    write(
        "e_second",
        &XORBYTES
            .replace("name = \"xorbytes\"", "name = \"second\"")
            .replace("id = 300\n", ""),
    );
    std::fs::create_dir_all(root.join("f_no_manifest")).unwrap();
    let loaded = load_dir(&root).unwrap();
    let names: Vec<_> = loaded.manifests.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["xorbytes", "second"]);
    let errors: Vec<_> = loaded
        .errors
        .iter()
        .map(|e| {
            (
                e.file
                    .parent()
                    .unwrap()
                    .file_name()
                    .unwrap()
                    .to_str()
                    .unwrap(),
                e.field.as_str(),
            )
        })
        .collect();
    assert_eq!(
        errors,
        [
            ("b_same_name", "name"),
            ("c_same_id", "id"),
            ("d_bad_offset", "params[0].offset")
        ]
    );
    assert!(
        loaded.errors[0].reason.contains("a_good"),
        "{}",
        loaded.errors[0]
    );
    assert!(load_dir(&root.join("missing"))
        .unwrap_err()
        .contains("cannot read"));
    std::fs::remove_dir_all(&root).unwrap();
}
