//! Black-box tests of the `netaccel` CLI against a real node: every subcommand, over
//! HTTP and RAC, and the exit codes of each kind of failure.

use std::io::Write;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

struct Node {
    child: Child,
    http: String,
    rac: String,
    dir: PathBuf,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

use testkit::free_port;

/// The node binary, built beside this crate's binary by `cargo test --workspace`.
fn node_bin() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_netaccel")).with_file_name("netaccel-node");
    assert!(
        bin.exists(),
        "{} missing: run `cargo build -p netaccel-node` (or the whole workspace) first",
        bin.display()
    );
    bin
}

fn start_node(extra: &str) -> Node {
    let (http_port, rac_port) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("netaccel-cli-{}-{http_port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("node.toml");
    let text = format!("http = \"127.0.0.1:{http_port}\"\nrac = \"127.0.0.1:{rac_port}\"\nlog_level = \"warn\"\n{extra}");
    std::fs::write(&config, text).unwrap();
    let child = Command::new(node_bin())
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut node = Node {
        child,
        http: format!("http://127.0.0.1:{http_port}"),
        rac: format!("127.0.0.1:{rac_port}"),
        dir,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", http_port)).is_err()
        || TcpStream::connect(("127.0.0.1", rac_port)).is_err()
    {
        // The node prints why it stopped (a port taken, say) on the inherited stderr.
        if let Some(status) = node.child.try_wait().unwrap() {
            panic!(
                "node (HTTP port {http_port}, RAC port {rac_port}) exited at start-up: {status}"
            );
        }
        assert!(
            Instant::now() < deadline,
            "node did not listen on ports {http_port} and {rac_port} within 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    node
}

fn netaccel(node: &str, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_netaccel"))
        .arg("--node")
        .arg(node)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn call_over_http_and_rac_with_files_and_params() {
    let node = start_node("");
    let out = netaccel(&node.http, &["call", "to_uppercase"], b"hello");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"HELLO");

    let input = node.dir.join("values.bin");
    let output = node.dir.join("top.bin");
    let values: Vec<u8> = [5i32, -3, 9, 9, 0, 2]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    std::fs::write(&input, &values).unwrap();
    let (i, o) = (input.to_str().unwrap(), output.to_str().unwrap());
    let out = netaccel(
        &node.http,
        &["call", "topk", "-p", "k=3", "-i", i, "-o", o, "-v"],
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expect: Vec<u8> = [9i32, 9, 5].iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(std::fs::read(&output).unwrap(), expect);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("queue"),
        "verbose prints timings"
    );

    let out = netaccel(
        &node.http,
        &[
            "call", "sobel", "--rac", &node.rac, "-p", "width=2", "-p", "height=2",
        ],
        &[1, 2, 3, 4],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, vec![0; 4]);
}

#[test]
fn listing_and_reconfiguring() {
    let node = start_node("admin_token = \"t0k\"\n");
    let out = netaccel(&node.http, &["accelerators"], b"");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success());
    assert!(
        text.contains("topk") && text.contains("k:u32") && text.contains("matmul"),
        "{text}"
    );
    let out = netaccel(&node.http, &["slots", "--json"], b"");
    let slots: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(slots.as_array().unwrap().len(), 7);

    let out = netaccel(&node.http, &["load", "0", "sobel"], b"");
    assert_eq!(out.status.code(), Some(1), "no token: the node refuses");
    assert!(String::from_utf8_lossy(&out.stderr).contains("UNAUTHORIZED"));
    // A wrong token and a missing one are told apart, and the token is not echoed.
    let missing = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        missing.contains("needs `Authorization: Bearer"),
        "{missing}"
    );
    let out = netaccel(&node.http, &["load", "0", "sobel", "--token", "t0kk"], b"");
    assert_eq!(
        out.status.code(),
        Some(1),
        "a wrong token: the node refuses"
    );
    let wrong = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(wrong.contains("UNAUTHORIZED"), "{wrong}");
    assert!(wrong.contains("not this node's admin token"), "{wrong}");
    assert!(!wrong.contains("t0k"), "{wrong}");
    let out = netaccel(&node.http, &["load", "0", "sobel", "--token", "t0k"], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("slot 0 now holds sobel"));
    let out = netaccel(&node.http, &["slots"], b"");
    assert!(String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .unwrap()
        .contains("sobel"));
}

/// A load that takes a while (an RTL design's first build: tens of seconds) says on
/// stderr that it is going, about once a second and then every five; a quick one says
/// nothing there. stdout holds only the result either way.
#[test]
fn a_slow_load_says_it_is_still_loading() {
    let node = start_node("admin_token = \"t0k\"\nreconfig_delay_ms = 2500\n");
    let out = netaccel(&node.http, &["load", "0", "sobel", "--token", "t0k"], b"");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.starts_with("slot 0 now holds sobel"), "{stdout}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let progress: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        progress.len(),
        1,
        "one line after 1 s, none at 2.5 s: {stderr}"
    );
    assert!(
        progress[0].starts_with("loading sobel into slot 0: 1 s so far; the slot is reconfiguring"),
        "{stderr}"
    );
    // Without the delay the load is quick: no progress line.
    let node = start_node("admin_token = \"t0k\"\n");
    let out = netaccel(&node.http, &["load", "0", "sobel", "--token", "t0k"], b"");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn exit_codes_say_what_failed() {
    let node = start_node("");
    let out = netaccel(&node.http, &["call", "topk"], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing required parameter `k`"));
    let out = netaccel(&node.http, &["call", "nope"], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("UNKNOWN_ACCELERATOR"));
    let out = netaccel(&node.http, &["call", "topk", "-p", "k"], b"");
    assert_eq!(out.status.code(), Some(2));
    let out = netaccel(
        &node.http,
        &["call", "echo", "-i", "/nonexistent/file"],
        b"",
    );
    assert_eq!(out.status.code(), Some(2));
    let out = netaccel(
        &node.http,
        &["call", "topk", "--rac", &node.rac, "-p", "k=0"],
        b"",
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "params are checked before sending"
    );
    let out = netaccel(
        &node.http,
        &["call", "topk", "--rac", &node.rac, "-p", "k=1"],
        b"abc",
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "payload length is checked before sending"
    );
    let out = netaccel(
        &node.http,
        &["call", "minmax", "--rac", &node.rac],
        &f32::NAN.to_le_bytes(),
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "the node refuses what only it can check"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("BAD_REQUEST"));
    let dead = format!("http://127.0.0.1:{}", free_port());
    let out = netaccel(&dead, &["slots"], b"");
    assert_eq!(out.status.code(), Some(3));
}

/// The spans (first and one-past-last character) of the words of a line.
fn word_spans(line: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in line.chars().chain([' ']).enumerate() {
        match (c == ' ', start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                spans.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    spans
}

/// Every cell of every row sits under its header: same left edge or same right edge.
fn assert_lined_up(table: &str) {
    let mut lines = table.lines();
    let header = word_spans(lines.next().expect("a header line"));
    let mut rows = 0;
    for line in lines {
        let cells = word_spans(line);
        assert_eq!(cells.len(), header.len(), "cells of {line:?}:\n{table}");
        for (cell, head) in cells.iter().zip(&header) {
            assert!(
                cell.0 == head.0 || cell.1 == head.1,
                "{line:?}: a cell at {cell:?} is not under its header at {head:?}:\n{table}"
            );
        }
        rows += 1;
    }
    assert!(rows > 0, "no rows:\n{table}");
}

#[test]
fn tables_line_up_with_their_headers() {
    let node = start_node(
        "[[slots]]\naccelerator = \"to_uppercase\"\n[[slots]]\naccelerator = \"sobel\"\n",
    );
    for listing in ["slots", "accelerators"] {
        let out = netaccel(&node.http, &[listing], b"");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.lines().all(|l| !l.ends_with(' ')),
            "trailing spaces:\n{text}"
        );
        assert_lined_up(&text);
    }
}

#[test]
fn node_address_without_a_scheme_is_http() {
    let node = start_node("");
    let bare = node.http.strip_prefix("http://").unwrap();
    let out = netaccel(bare, &["call", "to_uppercase"], b"abc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"ABC");
    let out = netaccel(&format!("{bare}/"), &["slots", "--json"], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = netaccel(&format!("ftp://{bare}"), &["slots"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("HOST:PORT"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // https:// is TLS (tests/cli_tls.rs): to a plain listener, the handshake fails and
    // the node cannot be reached.
    let out = netaccel(&format!("https://{bare}"), &["slots"], b"");
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn a_failed_rac_connection_names_the_rac_address_not_the_http_one() {
    let dead_http = format!("http://127.0.0.1:{}", free_port());
    let dead_rac = format!("127.0.0.1:{}", free_port());
    let out = netaccel(
        &dead_http,
        &["call", "to_uppercase", "--rac", &dead_rac],
        b"abc",
    );
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("RAC") && err.contains(&dead_rac), "{err}");
    assert!(
        !err.contains(&dead_http) && !err.contains("http://"),
        "{err}"
    );
}

#[test]
fn every_command_and_option_has_help_text() {
    let help = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_netaccel"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    // The entries of a section ("Commands:", "Arguments:", "Options:"): name, text.
    let entries = |text: &str, section: &str| -> Vec<(String, String)> {
        text.lines()
            .skip_while(|l| *l != section)
            .skip(1)
            .take_while(|l| !l.is_empty())
            .map(|l| {
                let l = l.trim_start();
                match l.split_once("  ") {
                    Some((name, text)) => (name.to_string(), text.trim().to_string()),
                    None => (l.to_string(), String::new()),
                }
            })
            .collect()
    };
    let top = help(&["--help"]);
    let commands: Vec<String> = entries(&top, "Commands:")
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| name != "help")
        .collect();
    assert_eq!(
        commands,
        [
            "call",
            "accelerators",
            "slots",
            "load",
            "nodes",
            "functions",
            "rtl"
        ]
    );
    let mut pages: Vec<Vec<&str>> = commands.iter().map(|c| vec![c.as_str()]).collect();
    for sub in ["create", "get", "delete", "scale"] {
        pages.push(vec!["functions", sub]);
    }
    for sub in ["build", "synth"] {
        pages.push(vec!["rtl", sub]);
    }
    let mut checked = 0;
    for (page, text) in
        std::iter::once(("netaccel".to_string(), top.clone())).chain(pages.iter().map(|args| {
            let mut with_help = args.clone();
            with_help.push("--help");
            (format!("netaccel {}", args.join(" ")), help(&with_help))
        }))
    {
        for section in ["Commands:", "Arguments:", "Options:"] {
            for (name, about) in entries(&text, section) {
                assert!(
                    !about.is_empty(),
                    "{page}: `{name}` has no help text:\n{text}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 20, "only {checked} entries found");
}

/// `netaccel ARGS`, without a node: its exit status, stdout and stderr.
fn netaccel_alone(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_netaccel"))
        .args(args)
        .env_remove("NETACCEL_NODE")
        .env_remove("NETACCEL_REGISTRY")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn the_top_help_says_where_each_commands_options_are() {
    let (code, top, _) = netaccel_alone(&["--help"]);
    assert_eq!(code, Some(0));
    assert!(top.contains("netaccel COMMAND --help"), "{top}");
}

#[test]
fn each_command_shows_only_the_shared_options_it_uses() {
    let options = |args: &[&str]| -> Vec<&'static str> {
        let mut with_help = args.to_vec();
        with_help.push("--help");
        let (code, text, err) = netaccel_alone(&with_help);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        [
            "--node",
            "--registry ",
            "--registry-token",
            "--cacert",
            "--cert",
        ]
        .into_iter()
        .filter(|o| text.contains(o))
        .collect()
    };
    let node = ["--node", "--cacert", "--cert"];
    let every = [
        "--node",
        "--registry ",
        "--registry-token",
        "--cacert",
        "--cert",
    ];
    assert_eq!(options(&["call"]), every);
    for command in ["accelerators", "slots", "load"] {
        assert_eq!(options(&[command]), node, "{command}");
    }
    assert_eq!(options(&["nodes"]), ["--registry "]);
    for args in [
        &["functions"][..],
        &["functions", "create"],
        &["functions", "scale"],
    ] {
        assert_eq!(
            options(args),
            ["--registry ", "--registry-token"],
            "{args:?}"
        );
    }
    for args in [&["rtl"][..], &["rtl", "build"], &["rtl", "synth"]] {
        assert!(options(args).is_empty(), "{args:?}");
    }
    // Hidden, not refused: a shared option may still be given anywhere.
    let (code, _, err) = netaccel_alone(&["rtl", "build", "--node", "127.0.0.1:1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(!err.contains("unexpected argument"), "{err}");
}

#[test]
fn a_missing_name_does_not_read_as_if_node_were_required() {
    for (args, usage) in [
        (
            &["call", "--node", "127.0.0.1:1"][..],
            "netaccel [--node ADDR] call [OPTIONS] <NAME>",
        ),
        (
            &["load", "--node", "127.0.0.1:1", "0"],
            "netaccel [--node ADDR] load",
        ),
        (
            &["functions", "create", "--registry", "127.0.0.1:1"],
            "netaccel [--registry URL] functions create",
        ),
    ] {
        let (code, _, err) = netaccel_alone(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("<NAME>"), "{args:?}: {err}");
        assert!(err.contains(usage), "{args:?}: {err}");
        assert!(
            !err.contains("--node <ADDR>") && !err.contains("--registry <URL>"),
            "{args:?}: the usage line shows an optional address as if required: {err}"
        );
    }
    let (_, _, err) = netaccel_alone(&["call"]);
    assert!(err.contains("--function <F>"), "{err}");
}

/// A node that refuses anonymous callers (docs/security.md): `--tenant-token` calls
/// over HTTP, `--tenant` with it over RAC (its `hello`), and each refusal says why.
#[test]
fn a_tenant_calls_with_its_token_over_http_and_rac() {
    // The argon2 hash of `change-me-team-a`, as docs/security.md configures team-a.
    let node = start_node(
        "anonymous = \"refuse\"\n[[tenants]]\nname = \"team-a\"\n\
         token_hash = \"$argon2id$v=19$m=19456,t=2,p=1$5LlB4yVjvbZGdxQ78TTArA$E/qDJ8ursG5rp13o43OdqlYONxyBDb+RBr5IVj9h4uU\"\n\
         call = [\"to_uppercase\"]\n",
    );
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
    let out = netaccel(&node.http, &["call", "to_uppercase"], b"abc");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("UNAUTHORIZED"), "{}", stderr(&out));
    let token = ["--tenant-token", "change-me-team-a"];
    let out = netaccel(
        &node.http,
        &[&["call", "to_uppercase"][..], &token].concat(),
        b"abc",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, b"ABC");
    // The token goes with the node's other requests too: team-a is known there, and
    // its policy (calls only) refuses it the catalog, where a caller without a token
    // is refused as anonymous.
    let out = netaccel(&node.http, &["slots"], b"");
    assert!(
        stderr(&out).contains("401 UNAUTHORIZED"),
        "{}",
        stderr(&out)
    );
    let out = netaccel(&node.http, &[&["slots"][..], &token].concat(), b"");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("403 FORBIDDEN: tenant `team-a` may not read"),
        "{}",
        stderr(&out)
    );

    // Over RAC: no hello, refused; a hello with the token, served; a token without the
    // tenant's name is a usage error (the hello names the tenant).
    let rac = ["call", "to_uppercase", "--rac", &node.rac];
    let out = netaccel(&node.http, &rac, b"abc");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("UNAUTHORIZED"), "{}", stderr(&out));
    let out = netaccel(
        &node.http,
        &[&rac[..], &["--tenant", "team-a"], &token].concat(),
        b"abc",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, b"ABC");
    let wrong = ["--tenant", "team-a", "--tenant-token", "change-me-team-b"];
    let out = netaccel(&node.http, &[&rac[..], &wrong].concat(), b"abc");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("UNAUTHORIZED"), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("change-me"),
        "the token is not echoed"
    );
    let out = netaccel(&node.http, &[&rac[..], &token].concat(), b"abc");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("needs --tenant NAME"),
        "{}",
        stderr(&out)
    );
}
