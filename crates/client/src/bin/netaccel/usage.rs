//! Which of the shared options each command shows in its help.
//!
//! The options that say where the node and the registry are, and how to speak TLS to
//! them, are global: they may be written before or after the command. clap would show
//! all of them on every command's page, where most have nothing to do: `rtl` talks to
//! neither, `nodes` and `functions` only to the registry. Each command's page shows
//! those it uses; the others stay accepted (a global option may be given anywhere, and
//! is ignored by a command that has no use for it) but hidden.

use clap::Command;

/// The shared options each command uses, by the command's name; a command not listed
/// uses none of them.
const USES: &[(&str, &[&str])] = &[
    (
        "call",
        &[
            "node",
            "registry",
            "registry_token",
            "cacert",
            "cert",
            "key",
            "tenant",
            "tenant_token",
        ],
    ),
    (
        "accelerators",
        &["node", "cacert", "cert", "key", "tenant_token"],
    ),
    ("slots", &["node", "cacert", "cert", "key", "tenant_token"]),
    ("load", &["node", "cacert", "cert", "key", "tenant_token"]),
    ("nodes", &["registry"]),
    ("functions", &["registry", "registry_token"]),
];

/// `cli` with each command's unused shared options hidden from its help (and from
/// its subcommands', which inherit them).
pub fn scope_shared_options(cli: Command) -> Command {
    let shared: Vec<clap::Arg> = cli
        .get_arguments()
        .filter(|a| a.is_global_set())
        .cloned()
        .collect();
    assert!(!shared.is_empty(), "the CLI has shared (global) options");
    let names: Vec<String> = cli
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    for (command, _) in USES {
        assert!(
            names.iter().any(|n| n == command),
            "USES names `{command}`, which is no command of the CLI"
        );
    }
    names.iter().fold(cli, |cli, name| {
        let uses = USES
            .iter()
            .find(|(command, _)| command == name)
            .map_or(&[][..], |(_, uses)| *uses);
        cli.mut_subcommand(name, |mut command| {
            // clap gives a subcommand the parent's global options it does not define
            // itself: a hidden copy defined here is kept, and inherited further down.
            for arg in shared
                .iter()
                .filter(|a| !uses.contains(&a.get_id().as_str()))
            {
                command = command.arg(arg.clone().hide(true));
            }
            command
        })
    })
}
