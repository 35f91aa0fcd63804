//! `flux-bench`: measured speed and API cost of a flux-handoff handoff, side by side with the
//! shell way, on a control plane of its own. Run it with `cargo xtask bench [--quick]`, which
//! starts that control plane and sets `FLUX_HANDOFF_KUBECONFIG`.
//!
//! 1. full handoff through the libraries, then the same handoff the shell way (`kubectl` +
//!    `jq` per step), alternating, each through a fresh counting proxy;
//! 2. fan-out of the Lease-gated reassertion into n namespaces;
//! 3. pause time with `ack`, `restart` and `none` while the parent is mid-reconcile;
//! 4. a handoff of 50 targets under one parent (and of 1, for scale);
//! 5. the `flux` CLI peer: `flux suspend` + `flux resume` of the full handoff's chain, beside
//!    the library's pause and resume of it (`--flux-bin`; skipped in one line without it);
//! 6. footprint of the release `flux-handoff` (start-up, peak RSS, size);
//! 7. a table for people, `target/flux-handoff/bench/bench.json`, `fanout.svg`, and one
//!    `bench:` line per scenario last.
//!
//! With `--real --real-state DIR` (`cargo xtask bench --real`), on a real-Flux plane instead:
//! only the `real` scenario ([`bench::real`]), one `bench: real_<case>` line per case, written
//! to `bench-real.json`.
//!
//! Usage: `flux-bench [--quick] [--out DIR] [--handoff-bin PATH] [--flux-bin PATH] [--only a,b]`
//! with scenario names `full_handoff`, `flux_cli`, `fanout`, `retire`, `chain`, `footprint`;
//! `flux-bench --real --real-state DIR [--flux-bin PATH] [--only ks,hr_ack]` (case names
//! containing one of them).

mod bench;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use serde_json::{Value, json};

use bench::stats::Summary;
use bench::{Settings, chain, fanout, footprint, handoff, retire, shell, svg};

/// The benchmarks, on the control plane of `FLUX_HANDOFF_KUBECONFIG`.
#[derive(Debug, clap::Parser)]
#[command(name = "flux-bench")]
struct Args {
    /// Fewer repetitions and smaller fan-outs.
    #[arg(long)]
    quick: bool,
    /// Where bench.json and fanout.svg go.
    #[arg(long, value_name = "DIR", default_value = "target/flux-handoff/bench")]
    out: PathBuf,
    /// The release flux-handoff binary, for the footprint scenario.
    #[arg(long, value_name = "PATH")]
    handoff_bin: Option<PathBuf>,
    /// The `flux` CLI, for its peer scenario.
    #[arg(long, value_name = "PATH")]
    flux_bin: Option<PathBuf>,
    /// Run only these scenarios (comma-separated: `full_handoff`, `flux_cli`, `fanout`,
    /// `retire`, `chain`, `footprint`).
    #[arg(long, value_name = "a,b", value_delimiter = ',')]
    only: Option<Vec<String>>,
    /// Run the real-Flux scenario instead (needs `--real-state`).
    #[arg(long, requires = "real_state")]
    real: bool,
    /// The state directory of the real-Flux plane (`cargo xtask bench --real` passes it).
    #[arg(long, value_name = "DIR")]
    real_state: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    testkit::install_crypto();
    let args = <Args as clap::Parser>::parse();
    if std::env::var_os(testkit::plane::KUBECONFIG_ENV).is_none() {
        bail!(
            "set {} to the kubeconfig of a control plane of its own (cargo xtask bench does)",
            testkit::plane::KUBECONFIG_ENV
        );
    }
    std::fs::create_dir_all(&args.out)?;
    let scratch = args.out.join("scratch");
    std::fs::create_dir_all(&scratch)?;
    let admin = kube::Client::try_from(testkit::admin_config().await?)?;
    if args.real {
        return Box::pin(real(&admin, &args, &scratch)).await;
    }
    Box::pin(model(&admin, &args, &scratch)).await
}

/// The scenarios against the controller model.
async fn model(admin: &kube::Client, args: &Args, scratch: &std::path::Path) -> anyhow::Result<()> {
    let wanted = |name: &str| {
        args.only
            .as_ref()
            .is_none_or(|o| o.iter().any(|x| x == name))
    };
    let settings = Settings {
        reps: if args.quick { 3 } else { 5 },
        interval: Duration::from_millis(250),
        fanout_sizes: if args.quick {
            vec![10, 100, 1000]
        } else {
            vec![10, 100, 300, 1000]
        },
        handoff_bin: args.handoff_bin.clone(),
        flux_bin: args.flux_bin.clone(),
        phase: Duration::from_millis(200),
        termination_grace: Duration::from_secs(10),
    };
    let admin = admin.clone();
    let scratch = scratch.to_path_buf();
    let machine = machine(args.quick);
    eprintln!(
        "flux-bench: {}",
        machine["summary"].as_str().unwrap_or_default()
    );

    let mut doc = json!({ "machine": machine, "settings": {
        "reps": settings.reps, "interval_ms": bench::ms(settings.interval),
        "phase_ms": bench::ms(settings.phase),
        "termination_grace_ms": bench::ms(settings.termination_grace), "fanout_sizes": settings.fanout_sizes,
        "mandated_quiet_ms": bench::ms(handoff::mandated_quiet(settings.interval)),
    }});
    let mut table: Vec<String> = Vec::new();
    let mut lines: Vec<String> = Vec::new();

    let mut add = |name: &str, (t, l, v): Scenario| {
        table.extend(t);
        lines.push(l);
        doc[name] = v;
    };
    if wanted("full_handoff") {
        add(
            "full_handoff",
            full_handoff(&admin, &settings, &scratch).await?,
        );
    }
    if wanted("flux_cli") {
        add(
            "flux_cli",
            Box::pin(bench::fluxcli::scenario(&admin, &settings, &scratch)).await?,
        );
    }
    if wanted("fanout") {
        let (t, l, v, chart) = fan_out(&admin, &settings, &machine).await?;
        std::fs::write(args.out.join("fanout.svg"), chart)?;
        add("fanout", (t, l, v));
    }
    if wanted("retire") {
        add("retire", Box::pin(retirement(&admin, &settings)).await?);
    }
    if wanted("chain") {
        add("chain", Box::pin(many_targets(&admin, &settings)).await?);
    }
    if wanted("footprint") {
        add(
            "footprint",
            footprint_scenario(&admin, &settings, &scratch).await?,
        );
    }
    doc["machine"]["loadavg_end"] = json!(loadavg());
    doc["bench_lines"] = json!(lines);
    std::fs::write(
        args.out.join("bench.json"),
        serde_json::to_string_pretty(&doc)?,
    )?;
    let _ = std::fs::remove_dir_all(&scratch);

    println!();
    println!("| scenario | measure | median (min–max) |");
    println!("|---|---|---|");
    for row in &table {
        println!("{row}");
    }
    println!();
    println!(
        "written: {}/bench.json, {}/fanout.svg",
        args.out.display(),
        args.out.display()
    );
    for l in &lines {
        println!("{l}");
    }
    Ok(())
}

type Scenario = (Vec<String>, String, Value);

/// `--real`: the real-Flux scenario alone.
async fn real(admin: &kube::Client, args: &Args, scratch: &std::path::Path) -> anyhow::Result<()> {
    let settings = bench::real::RealSettings {
        state: args.real_state.clone().unwrap_or_default(),
        flux_bin: args.flux_bin.clone().filter(|b| b.is_file()),
        only: args.only.clone(),
    };
    let machine = machine(false);
    eprintln!(
        "flux-bench: real Flux, {}",
        machine["summary"].as_str().unwrap_or_default()
    );
    let (table, lines, mut v) = bench::real::scenario(admin, &settings, scratch).await?;
    v["machine"] = machine;
    v["machine"]["loadavg_end"] = json!(loadavg());
    v["bench_lines"] = json!(lines);
    std::fs::write(
        args.out.join("bench-real.json"),
        serde_json::to_string_pretty(&v)?,
    )?;
    let _ = std::fs::remove_dir_all(scratch);
    println!();
    println!("| scenario | measure | value |");
    println!("|---|---|---|");
    for row in &table {
        println!("{row}");
    }
    println!();
    println!("written: {}/bench-real.json", args.out.display());
    for l in &lines {
        println!("{l}");
    }
    Ok(())
}

async fn full_handoff(
    admin: &kube::Client,
    s: &Settings,
    scratch: &std::path::Path,
) -> anyhow::Result<Scenario> {
    let mut lib = Vec::new();
    let mut sh = Vec::new();
    for rep in 0..s.reps {
        eprintln!("flux-bench: full handoff {}/{}", rep + 1, s.reps);
        lib.push(handoff::run_once(admin, s).await?);
        sh.push(shell::run_once(admin, s, scratch).await?);
    }
    let f = |v: Vec<f64>| Summary::of(&v);
    let lib_over = f(lib.iter().map(|r| r.overhead_ms).collect());
    let lib_wall = f(lib.iter().map(|r| r.wall_ms).collect());
    #[allow(clippy::cast_precision_loss)] // request counts are small
    let lib_req = f(lib.iter().map(|r| r.requests as f64).collect());
    let sh_over = f(sh.iter().map(|r| r.overhead_ms).collect());
    let sh_wall = f(sh.iter().map(|r| r.wall_ms).collect());
    #[allow(clippy::cast_precision_loss)] // request counts are small
    let sh_req = f(sh.iter().map(|r| r.requests as f64).collect());
    #[allow(clippy::cast_precision_loss)] // process counts are small
    let sh_proc = f(sh.iter().map(|r| r.processes as f64).collect());
    let ratio = sh_over.median / lib_over.median.max(f64::EPSILON);
    let table = vec![
        format!(
            "| full handoff (library) | wall ms | {} |",
            lib_wall.show(0)
        ),
        format!(
            "| full handoff (library) | overhead ms | {} |",
            lib_over.show(0)
        ),
        format!(
            "| full handoff (library) | API requests | {} |",
            lib_req.show(0)
        ),
        format!(
            "| full handoff (library) | requests by verb (last run) | {} |",
            verbs(&lib.last().map(|r| r.by_verb.clone()).unwrap_or_default())
        ),
        format!("| shell way (kubectl+jq) | wall ms | {} |", sh_wall.show(0)),
        format!(
            "| shell way (kubectl+jq) | overhead ms | {} |",
            sh_over.show(0)
        ),
        format!(
            "| shell way (kubectl+jq) | API requests | {} |",
            sh_req.show(0)
        ),
        format!(
            "| shell way (kubectl+jq) | processes | {} |",
            sh_proc.show(0)
        ),
        format!(
            "| shell way (kubectl+jq) | requests by verb (last run) | {} |",
            verbs(&sh.last().map(|r| r.by_verb.clone()).unwrap_or_default())
        ),
        format!("| full handoff | shell/library overhead ratio | {ratio:.1}x |"),
    ];
    let line = format!(
        "bench: full_handoff overhead_ms={:.0} requests={:.0} shell_overhead_ms={:.0} shell_requests={:.0} ratio={ratio:.1}",
        lib_over.median, lib_req.median, sh_over.median, sh_req.median
    );
    let v = json!({
        "mode": "library in-process (flux-fence Lease + flux-suspend Handoff + ghcr-auth Reasserter gated by the Lease)",
        "library": { "wall_ms": lib_wall, "overhead_ms": lib_over, "requests": lib_req, "runs": lib },
        "shell": { "wall_ms": sh_wall, "overhead_ms": sh_over, "requests": sh_req, "processes": sh_proc, "runs": sh },
        "ratio": ratio,
    });
    Ok((table, line, v))
}

async fn fan_out(
    admin: &kube::Client,
    s: &Settings,
    machine: &Value,
) -> anyhow::Result<(Vec<String>, String, Value, String)> {
    let mut table = Vec::new();
    let mut points = Vec::new();
    let mut runs = Vec::new();
    let mut last = String::new();
    for &n in &s.fanout_sizes {
        let mut ms = Vec::new();
        let mut req = Vec::new();
        for rep in 0..s.reps {
            eprintln!("flux-bench: fan-out n={n} {}/{}", rep + 1, s.reps);
            let r = fanout::run_once(admin, n).await?;
            ms.push(r.ms);
            #[allow(clippy::cast_precision_loss)] // request counts are small
            req.push(r.requests as f64);
            runs.push(r);
        }
        let (t, q) = (Summary::of(&ms), Summary::of(&req));
        #[allow(clippy::cast_precision_loss)] // namespace counts are small
        let per = t.median / n as f64;
        table.push(format!("| fan-out n={n} | ms | {} |", t.show(0)));
        table.push(format!("| fan-out n={n} | API requests | {} |", q.show(0)));
        table.push(format!("| fan-out n={n} | ms per namespace | {per:.2} |"));
        last = format!(
            "bench: fanout n={n} ms={:.0} requests={:.0} ms_per_ns={per:.2}",
            t.median, q.median
        );
        points.push((n, t, q));
    }
    let chart_points: Vec<(usize, Summary)> =
        points.iter().map(|(n, t, _)| (*n, t.clone())).collect();
    let chart = svg::fanout_chart(
        &chart_points,
        machine["summary"].as_str().unwrap_or_default(),
    );
    let v = json!({
        "concurrency": ghcr_auth::reassert::FANOUT_CONCURRENCY,
        "note": "ghcr-auth Reasserter fans out at most FANOUT_CONCURRENCY consumer writes at once (one at first, one more per success), the root last; the writes waiting for the Lease gate at once share one assertion (one CAS update on the Lease)",
        "points": points.iter().map(|(n, t, q)| json!({ "n": n, "ms": t, "requests": q })).collect::<Vec<_>>(),
        "runs": runs,
    });
    Ok((table, last, v, chart))
}

async fn retirement(admin: &kube::Client, s: &Settings) -> anyhow::Result<Scenario> {
    let mut table = Vec::new();
    let mut v = json!({});
    let mut medians = Vec::new();
    let mut floor = None;
    for (name, strategy) in retire::STRATEGIES {
        let mut ms = Vec::new();
        let mut req = Vec::new();
        let mut floors = Vec::new();
        for rep in 0..s.reps {
            eprintln!("flux-bench: retire {name} {}/{}", rep + 1, s.reps);
            let r = Box::pin(retire::run_once(admin, s, strategy)).await?;
            ms.push(r.ms);
            #[allow(clippy::cast_precision_loss)] // request counts are small
            req.push(r.requests as f64);
            floors.extend(r.floor_ms);
        }
        let (t, q) = (Summary::of(&ms), Summary::of(&req));
        if !floors.is_empty() {
            let fl = Summary::of(&floors);
            table.push(format!(
                "| retire {name} | floor ms (acknowledgement + proof spacing and reads) | {} |",
                fl.show(0)
            ));
            v[format!("{name}_floor")] = json!({ "ms": fl });
            floor.get_or_insert(fl.median);
        }
        table.push(format!(
            "| retire {name} | ms to proven pause | {} |",
            t.show(0)
        ));
        table.push(format!("| retire {name} | API requests | {} |", q.show(0)));
        medians.push(t.median);
        v[name] = json!({ "ms": t, "requests": q });
    }
    let line = format!(
        "bench: retire ack_ms={:.0} ack_floor_ms={:.0} restart_ms={:.0} none_ms={:.0}",
        medians[0],
        floor.unwrap_or(f64::NAN),
        medians[1],
        medians[2]
    );
    table.push(format!(
        "| retire | restart/ack ratio | {:.1}x |",
        medians[1] / medians[0].max(f64::EPSILON)
    ));
    Ok((table, line, v))
}

/// Targets of the chain scenario.
const CHAIN_TARGETS: usize = 50;

async fn many_targets(admin: &kube::Client, s: &Settings) -> anyhow::Result<Scenario> {
    let mut table = Vec::new();
    let mut v = json!({});
    let mut line = String::new();
    for n in [1, CHAIN_TARGETS] {
        let mut ms = Vec::new();
        let mut req = Vec::new();
        for rep in 0..s.reps {
            eprintln!("flux-bench: chain n={n} {}/{}", rep + 1, s.reps);
            let r = Box::pin(chain::run_once(admin, s, n)).await?;
            ms.push(r.ms);
            #[allow(clippy::cast_precision_loss)] // request counts are small
            req.push(r.requests as f64);
        }
        let (t, q) = (Summary::of(&ms), Summary::of(&req));
        table.push(format!(
            "| chain n={n} (one parent) | wall ms | {} |",
            t.show(0)
        ));
        table.push(format!(
            "| chain n={n} (one parent) | API requests | {} |",
            q.show(0)
        ));
        v[format!("n{n}")] = json!({ "n": n, "ms": t, "requests": q });
        line = format!(
            "bench: chain n={n} ms={:.0} requests={:.0}",
            t.median, q.median
        );
    }
    Ok((table, line, v))
}

async fn footprint_scenario(
    admin: &kube::Client,
    s: &Settings,
    scratch: &std::path::Path,
) -> anyhow::Result<Scenario> {
    let Some(bin) = s.handoff_bin.clone().filter(|b| b.is_file()) else {
        eprintln!("flux-bench: no --handoff-bin; footprint skipped");
        return Ok((
            vec!["| footprint | skipped | no flux-handoff binary |".into()],
            "bench: footprint startup_ms=n/a rss_mb=n/a binary_mb=n/a".into(),
            json!({ "skipped": "no flux-handoff binary" }),
        ));
    };
    let ns = bench::setup::fresh_namespace(admin, "bench-start").await?;
    let mut start = Vec::new();
    for rep in 0..s.reps.max(5) {
        eprintln!("flux-bench: start-up {}/{}", rep + 1, s.reps.max(5));
        start.push(footprint::startup_once(&bin, scratch, &ns).await?);
    }
    let mut rss = Vec::new();
    for rep in 0..s.reps {
        eprintln!("flux-bench: peak RSS {}/{}", rep + 1, s.reps);
        rss.push(footprint::rss_once(admin, s, &bin, scratch).await?);
    }
    let (st, rs) = (Summary::of(&start), Summary::of(&rss));
    let mb = footprint::binary_mb(&bin)?;
    let table = vec![
        format!(
            "| footprint | start-up to first API request ms (`fences`) | {} |",
            st.show(1)
        ),
        format!(
            "| footprint | peak RSS MB (`run -- true`) | {} |",
            rs.show(1)
        ),
        format!("| footprint | release binary MB | {mb:.1} |"),
    ];
    let line = format!(
        "bench: footprint startup_ms={:.1} rss_mb={:.1} binary_mb={mb:.1}",
        st.median, rs.median
    );
    Ok((
        table,
        line,
        json!({ "startup_ms": st, "rss_mb": rs, "binary_mb": mb }),
    ))
}

fn verbs(m: &std::collections::BTreeMap<String, u64>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn machine(quick: bool) -> Value {
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZeroUsize::get);
    let load = loadavg();
    json!({
        "cores": cores,
        "loadavg_start": load,
        "quick": quick,
        "summary": format!("{cores} cores, load {load} at start{}", if quick { ", --quick" } else { "" }),
    })
}
