//! `verify [--quick] [--threads N]`: checks every property to the bound, then each mutant;
//! the last line is `verify: states=<N> properties=<K> violations=<V> mutants_caught=<C>/<M>`.
//! Exit 0 only with no violation and every mutant caught.

use std::process::ExitCode;

use verify::{Bounds, Mutant, check, property_names};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let threads = args
        .iter()
        .position(|a| a == "--threads")
        .and_then(|i| args.get(i + 1))
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    let bounds = if args.iter().any(|a| a == "--tiny") {
        Bounds::tiny()
    } else if quick {
        Bounds::quick()
    } else {
        Bounds::full()
    };
    let bounds = overrides(bounds, &args);
    let mutants = !args.iter().any(|a| a == "--no-mutants");
    println!("verify: bound {bounds}");

    // Development only: `--mutants-only` skips the exploration of the real decisions.
    let bounds_for_check = if args.iter().any(|a| a == "--mutants-only") {
        Bounds::tiny()
    } else {
        bounds
    };
    let out = check(bounds_for_check, None, threads);
    let names = property_names();
    for name in &names {
        let verdict = if out.violations.iter().any(|(n, _)| n == name) {
            "VIOLATED"
        } else {
            "holds"
        };
        println!(
            "property {name}: {verdict} (states={} depth={})",
            out.states, out.depth
        );
    }
    for (name, trace) in &out.violations {
        println!("counterexample for {name} ({} steps):", trace.len());
        for (i, line) in trace.iter().enumerate() {
            println!("  {:>3}. {line}", i + 1);
        }
    }
    println!(
        "verify: explored {} states in {:.1}s",
        out.states,
        out.elapsed.as_secs_f64()
    );

    let mut caught = 0;
    let only = args
        .iter()
        .position(|a| a == "--mutant")
        .and_then(|i| args.get(i + 1));
    for m in Mutant::ALL
        .into_iter()
        .filter(|m| mutants && only.is_none_or(|o| o == m.name()))
    {
        let base = if args.iter().any(|a| a == "--mutants-at-bound") {
            bounds
        } else {
            Bounds::tiny()
        };
        let mb = m.bounds(base);
        let mo = check(mb, Some(m), threads);
        match mo.violations.first() {
            Some((prop, trace)) => {
                caught += 1;
                println!(
                    "mutant {}: caught by {prop}, counterexample of {} steps ({} states, {:.1}s; bound {mb})",
                    m.name(),
                    trace.len(),
                    mo.states,
                    mo.elapsed.as_secs_f64()
                );
                if args.iter().any(|a| a == "--traces") {
                    for (i, line) in trace.iter().enumerate() {
                        println!("  {:>3}. {line}", i + 1);
                    }
                }
            }
            None => println!(
                "mutant {}: NOT caught ({} states, {:.1}s)",
                m.name(),
                mo.states,
                mo.elapsed.as_secs_f64()
            ),
        }
    }
    let total = Mutant::ALL.len();
    println!(
        "verify: states={} properties={} violations={} mutants_caught={caught}/{total}",
        out.states,
        names.len(),
        out.violations.len()
    );
    if out.violations.is_empty() && caught == total {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Development: `--set crashes=0,lost=1,...` overrides single bounds.
fn overrides(mut bounds: Bounds, args: &[String]) -> Bounds {
    if let Some(spec) = args
        .iter()
        .position(|a| a == "--set")
        .and_then(|i| args.get(i + 1))
    {
        for kv in spec.split(',') {
            let (k, v) = kv.split_once('=').unwrap_or((kv, "1"));
            let n: u8 = v.parse().unwrap_or(0);
            match k {
                "runs" => bounds.runs = usize::from(n),
                "faults" => bounds.faults = n,
                "crashes" => bounds.crashes = n,
                "lost" => bounds.lost = n,
                "restarts" => bounds.restarts = n,
                "intervals" => bounds.intervals = n,
                "person" => bounds.person = n,
                "ticks" => bounds.ticks = n,
                "giveups" => bounds.giveups = n,
                "resume" => bounds.resume = n > 0,
                "recover" => bounds.recover = n > 0,
                "park" => bounds.park = n > 0,
                other => eprintln!("verify: unknown bound {other}"),
            }
        }
    }
    bounds
}
