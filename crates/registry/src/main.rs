//! The `netaccel-registry` binary: parses the command line and serves until SIGTERM
//! or SIGINT (`netaccel-registry hash-token` hashes a token read on stdin for the
//! credentials file's `token_hash`).

use std::process::ExitCode;

use clap::Parser;
use netaccel_registry::Args;

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("hash-token") {
        return credential::hash_token_command("netaccel-registry");
    }
    let config = match Args::parse().into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("netaccel-registry: {e}");
            return ExitCode::from(2);
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    // A control plane does little work per request: two threads are plenty.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(async {
        let listener = netaccel_registry::bind(config.listen).await?;
        tracing::info!(
            listen = %listener.local_addr().map_err(|e| e.to_string())?,
            store = ?config.store,
            "netaccel-registry serving"
        );
        netaccel_registry::serve(config, listener, shutdown_signal()).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("netaccel-registry: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
}
