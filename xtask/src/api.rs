//! `cargo xtask api [--bless]`: the public API of each library, listed from rustdoc's JSON and
//! compared with the committed listing `api/<crate>.txt`.
//!
//! Why a lister of our own: the maintained tools do not fit here. cargo-public-api needs a
//! nightly toolchain (rustdoc JSON is unstable; this machine has only 1.95 stable and cannot
//! download another) and cargo-semver-checks compares against a published or git baseline, not a
//! committed listing, and costs a long `cargo install` on a cold CI. Stable rustdoc writes the
//! same JSON with `RUSTC_BOOTSTRAP=1` (`-Z unstable-options --output-format json`); walking it
//! needs only `serde_json`, already a dependency, so a cold CI installs nothing.
//!
//! One line per public item, sorted: its kind, its path from the crate root (re-exports under
//! the name they are re-exported as), `#[non_exhaustive]`/`#[must_use]` where set, and for
//! functions, fields, constants and aliases the signature or type. Trait implementations
//! written in the crate (`impl Clone for X`) are listed; auto and blanket ones are not. Each
//! crate is documented with all its features: features are additive, so this is the largest
//! surface. The check also counts the root items (one per name at the crate root).

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::paths;

/// The libraries, in dependency order (also the publish order).
pub const LIBRARIES: [&str; 4] = ["flux-fence", "flux-suspend", "ghcr-auth", "handoff-app"];

/// Lists each library and compares (or with `bless`, writes) `api/<crate>.txt`.
pub fn run(bless: bool) -> anyhow::Result<()> {
    let root = paths::root();
    let mut changed = Vec::new();
    for krate in LIBRARIES {
        let json = rustdoc_json(&root, krate)?;
        let doc: Value = serde_json::from_str(
            &std::fs::read_to_string(&json)
                .with_context(|| format!("reading {}", json.display()))?,
        )?;
        let listing = Listing::of(&doc)?;
        let text = listing.text();
        println!(
            "api: {krate} root_items={} items={}",
            listing.root_items,
            listing.lines.len()
        );
        let file = root.join("api").join(format!("{krate}.txt"));
        let old = std::fs::read_to_string(&file).unwrap_or_default();
        if old == text {
            continue;
        }
        if bless {
            std::fs::create_dir_all(file.parent().expect("api/"))?;
            std::fs::write(&file, &text)?;
            println!("api: wrote {}", file.display());
        } else {
            print_diff(&old, &text);
            changed.push(krate);
        }
    }
    if !changed.is_empty() {
        bail!(
            "api: the public API of {} changed without its listing: review the lines above, \
             then run `cargo xtask api --bless` and commit api/",
            changed.join(", ")
        );
    }
    Ok(())
}

/// `cargo rustdoc` writing JSON for `krate` (all features); the JSON file's path.
fn rustdoc_json(root: &Path, krate: &str) -> anyhow::Result<PathBuf> {
    let args = [
        "rustdoc",
        "-p",
        krate,
        "--lib",
        "--all-features",
        "-Z",
        "unstable-options",
        "--output-format",
        "json",
    ];
    eprintln!("xtask: $ RUSTC_BOOTSTRAP=1 cargo {}", args.join(" "));
    let status = Command::new(paths::cargo())
        .args(args)
        .current_dir(root)
        .env("RUSTC_BOOTSTRAP", "1")
        .status()
        .context("cannot start cargo")?;
    if !status.success() {
        bail!("`cargo rustdoc -p {krate}` (JSON) failed ({status})");
    }
    Ok(paths::target_dir()
        .join("doc")
        .join(format!("{}.json", krate.replace('-', "_"))))
}

/// Lines only in the old listing (`-`) and only in the new one (`+`).
fn print_diff(old: &str, new: &str) {
    let old: BTreeSet<&str> = old.lines().collect();
    let new: BTreeSet<&str> = new.lines().collect();
    for line in old.difference(&new) {
        println!("- {line}");
    }
    for line in new.difference(&old) {
        println!("+ {line}");
    }
}

/// A crate's public API as sorted lines.
#[derive(Debug, Default)]
pub struct Listing {
    pub lines: BTreeSet<String>,
    pub root_items: usize,
}

impl Listing {
    /// Walks `doc` (rustdoc JSON) from its root module.
    pub fn of(doc: &Value) -> anyhow::Result<Self> {
        let index = doc.get("index").context("rustdoc JSON without `index`")?;
        let root_id = doc.get("root").context("rustdoc JSON without `root`")?;
        let root = item(index, root_id).context("the root module is not in the index")?;
        let name = root["name"].as_str().unwrap_or("crate").to_string();
        let mut walk = Walk {
            index,
            out: Self::default(),
            seen: HashSet::new(),
        };
        walk.out.root_items = walk.module(root, &name, true);
        Ok(walk.out)
    }

    /// The listing file's text.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for line in &self.lines {
            s.push_str(line);
            s.push('\n');
        }
        s
    }
}

struct Walk<'a> {
    index: &'a Value,
    out: Listing,
    seen: HashSet<(String, String)>,
}

fn item<'a>(index: &'a Value, id: &Value) -> Option<&'a Value> {
    let key = match id {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        _ => return None,
    };
    index.get(key)
}

/// The one key of an externally tagged value (`{"struct": {...}}`), or the string itself.
fn tag(v: &Value) -> (&str, &Value) {
    match v {
        Value::Object(m) if m.len() == 1 => {
            let (k, inner) = m.iter().next().expect("one key");
            (k.as_str(), inner)
        }
        Value::String(s) => (s.as_str(), &Value::Null),
        _ => ("?", &Value::Null),
    }
}

fn ids(v: &Value) -> impl Iterator<Item = &Value> {
    v.as_array().into_iter().flatten()
}

/// `#[non_exhaustive] #[must_use] ` as set on `it`.
fn marks(it: &Value) -> String {
    let attrs = it["attrs"].to_string();
    let mut s = String::new();
    if attrs.contains("non_exhaustive") {
        s.push_str("#[non_exhaustive] ");
    }
    if attrs.contains("must_use") {
        s.push_str("#[must_use] ");
    }
    s
}

impl Walk<'_> {
    fn line(&mut self, line: String) {
        self.out.lines.insert(line);
    }

    /// Lists a module's public items under `path`; returns how many names it has.
    fn module(&mut self, m: &Value, path: &str, is_root: bool) -> usize {
        let mut names = 0;
        for id in ids(&m["inner"]["module"]["items"]) {
            let Some(it) = item(self.index, id) else {
                continue;
            };
            if it["visibility"] != "public" {
                continue;
            }
            let (kind, inner) = tag(&it["inner"]);
            if kind == "use" {
                names += self.reexport(inner, path, is_root);
                continue;
            }
            let Some(name) = it["name"].as_str() else {
                continue;
            };
            names += 1;
            self.item(it, &format!("{path}::{name}"));
        }
        names
    }

    /// A `pub use`: the target listed under its new name, or (another crate's item) one line.
    fn reexport(&mut self, u: &Value, path: &str, is_root: bool) -> usize {
        let source = u["source"].as_str().unwrap_or("?");
        let target = item(self.index, &u["id"]).filter(|t| t["crate_id"] == 0);
        if u["is_glob"] == true {
            if let Some(t) = target {
                return self.module(t, path, is_root);
            }
            self.line(format!("use {path}::* = {source}::*"));
            return 1;
        }
        let name = u["name"].as_str().unwrap_or("?");
        let here = format!("{path}::{name}");
        match target {
            Some(t) => self.item(t, &here),
            None => self.line(format!("use {here} = {source}")),
        }
        1
    }

    fn item(&mut self, it: &Value, path: &str) {
        let (kind, inner) = tag(&it["inner"]);
        if !self.seen.insert((kind.to_string(), path.to_string())) {
            return;
        }
        let m = marks(it);
        match kind {
            "module" => {
                self.line(format!("mod {path}"));
                self.module(it, path, false);
            }
            "struct" => {
                let g = generics(&inner["generics"]);
                self.line(format!("{m}struct {path}{g}"));
                let (k, body) = tag(&inner["kind"]);
                match k {
                    "plain" => self.fields(&body["fields"], path),
                    "tuple" => {
                        for (i, f) in ids(body).enumerate() {
                            if let Some(f) = item(self.index, f) {
                                let t = ty(&f["inner"]["struct_field"]);
                                self.line(format!("field {path}::{i}: {t}"));
                            }
                        }
                    }
                    _ => {}
                }
                self.impls(&inner["impls"], path);
            }
            "enum" => {
                let g = generics(&inner["generics"]);
                self.line(format!("{m}enum {path}{g}"));
                for v in ids(&inner["variants"]) {
                    if let Some(v) = item(self.index, v) {
                        self.variant(v, path);
                    }
                }
                self.impls(&inner["impls"], path);
            }
            "trait" => {
                let g = generics(&inner["generics"]);
                let b = bounds(&inner["bounds"]);
                let b = if b.is_empty() { b } else { format!(": {b}") };
                self.line(format!("{m}trait {path}{g}{b}"));
                for i in ids(&inner["items"]) {
                    if let Some(i) = item(self.index, i) {
                        self.assoc(i, path, "trait-item");
                    }
                }
            }
            "function" => self.line(format!("{m}fn {path}{}", sig(inner))),
            "constant" => self.line(format!("const {path}: {}", ty(&inner["type"]))),
            "static" => self.line(format!("static {path}: {}", ty(&inner["type"]))),
            "type_alias" => self.line(format!(
                "type {path}{} = {}",
                generics(&inner["generics"]),
                ty(&inner["type"])
            )),
            "macro" | "proc_macro" => self.line(format!("macro {path}")),
            other => self.line(format!("{other} {path}")),
        }
    }

    fn fields(&mut self, fields: &Value, path: &str) {
        for f in ids(fields) {
            if let Some(f) = item(self.index, f) {
                let name = f["name"].as_str().unwrap_or("?");
                let t = ty(&f["inner"]["struct_field"]);
                self.line(format!("field {path}::{name}: {t}"));
            }
        }
    }

    fn variant(&mut self, v: &Value, path: &str) {
        let name = v["name"].as_str().unwrap_or("?");
        let here = format!("{path}::{name}");
        let (k, body) = tag(&v["inner"]["variant"]["kind"]);
        let m = marks(v);
        match k {
            "tuple" => {
                let parts: Vec<String> = ids(body)
                    .map(|f| {
                        item(self.index, f)
                            .map_or_else(|| "_".into(), |f| ty(&f["inner"]["struct_field"]))
                    })
                    .collect();
                self.line(format!("{m}variant {here}({})", parts.join(", ")));
            }
            "struct" => {
                self.line(format!("{m}variant {here} {{ .. }}"));
                self.fields(&body["fields"], &here);
            }
            _ => self.line(format!("{m}variant {here}")),
        }
    }

    /// Inherent methods and constants, and trait impls written in the crate.
    fn impls(&mut self, impls: &Value, path: &str) {
        for i in ids(impls) {
            let Some(imp) = item(self.index, i) else {
                continue;
            };
            let inner = &imp["inner"]["impl"];
            if inner["is_synthetic"] == true || !inner["blanket_impl"].is_null() {
                continue;
            }
            if let Some(t) = inner["trait"].as_object() {
                let t = path_ty(&Value::Object(t.clone()));
                let neg = if inner["is_negative"] == true {
                    "!"
                } else {
                    ""
                };
                self.line(format!(
                    "impl{} {neg}{t} for {}",
                    generics(&inner["generics"]),
                    ty(&inner["for"])
                ));
                continue;
            }
            for a in ids(&inner["items"]) {
                if let Some(a) = item(self.index, a)
                    && a["visibility"] == "public"
                {
                    self.assoc(a, path, "method");
                }
            }
        }
    }

    fn assoc(&mut self, a: &Value, path: &str, what: &str) {
        let name = a["name"].as_str().unwrap_or("?");
        let m = marks(a);
        let (kind, inner) = tag(&a["inner"]);
        let line = match kind {
            "function" => format!("{m}{what} {path}::{name}{}", sig(inner)),
            "assoc_const" | "constant" => {
                format!("{what} const {path}::{name}: {}", ty(&inner["type"]))
            }
            "assoc_type" => format!("{what} type {path}::{name}"),
            other => format!("{what} {other} {path}::{name}"),
        };
        self.line(line);
    }
}

/// `<T: Bound, 'a>` or nothing.
fn generics(g: &Value) -> String {
    let params: Vec<String> = ids(&g["params"])
        .filter_map(|p| {
            let name = p["name"].as_str()?;
            let (k, body) = tag(&p["kind"]);
            match k {
                "type" if body["is_synthetic"] == true => None,
                "type" => {
                    let b = bounds(&body["bounds"]);
                    Some(if b.is_empty() {
                        name.to_string()
                    } else {
                        format!("{name}: {b}")
                    })
                }
                "const" => Some(format!("const {name}: {}", ty(&body["type"]))),
                _ => Some(name.to_string()),
            }
        })
        .collect();
    if params.is_empty() {
        String::new()
    } else {
        format!("<{}>", params.join(", "))
    }
}

fn bounds(b: &Value) -> String {
    let parts: Vec<String> = ids(b)
        .map(|b| {
            let (k, body) = tag(b);
            match k {
                "trait_bound" => {
                    let m = if body["modifier"] == "maybe" { "?" } else { "" };
                    format!("{m}{}", path_ty(&body["trait"]))
                }
                "outlives" => body.as_str().unwrap_or("'_").to_string(),
                _ => k.to_string(),
            }
        })
        .collect();
    parts.join(" + ")
}

/// `(self, a: T) -> R`, with `async`/`const`/`unsafe` in front.
fn sig(f: &Value) -> String {
    let h = &f["header"];
    let mut pre = String::new();
    for (k, w) in [
        ("is_const", "const"),
        ("is_async", "async"),
        ("is_unsafe", "unsafe"),
    ] {
        if h[k] == true {
            pre.push(' ');
            pre.push_str(w);
        }
    }
    let inputs: Vec<String> = ids(&f["sig"]["inputs"])
        .map(|p| {
            let name = p[0].as_str().unwrap_or("_");
            let t = ty(&p[1]);
            match (name, t.as_str()) {
                ("self", "Self") => "self".into(),
                ("self", "&Self") => "&self".into(),
                ("self", "&mut Self") => "&mut self".into(),
                _ => format!("{name}: {t}"),
            }
        })
        .collect();
    let out = &f["sig"]["output"];
    let out = if out.is_null() {
        String::new()
    } else {
        format!(" -> {}", ty(out))
    };
    let g = generics(&f["generics"]);
    let pre = if pre.is_empty() {
        pre
    } else {
        format!("  [{}]", pre.trim())
    };
    format!("{g}({}){out}{pre}", inputs.join(", "))
}

/// A path with its generic arguments; the last segment of the name only, so an import style
/// does not change the listing.
fn path_ty(p: &Value) -> String {
    let name = p["path"].as_str().unwrap_or("?");
    let name = name.rsplit("::").next().unwrap_or(name);
    let (k, body) = tag(&p["args"]);
    match k {
        "angle_bracketed" => {
            let mut parts: Vec<String> = ids(&body["args"])
                .map(|a| {
                    let (k, v) = tag(a);
                    match k {
                        "type" => ty(v),
                        "lifetime" => v.as_str().unwrap_or("'_").to_string(),
                        "const" => v["expr"].as_str().unwrap_or("_").to_string(),
                        _ => "_".into(),
                    }
                })
                .collect();
            for c in ids(&body["constraints"]) {
                let n = c["name"].as_str().unwrap_or("?");
                let (bk, bv) = tag(&c["binding"]);
                let rhs = match bk {
                    "equality" => ty(&bv["type"]),
                    _ => bounds(bv),
                };
                parts.push(format!("{n} = {rhs}"));
            }
            if parts.is_empty() {
                name.to_string()
            } else {
                format!("{name}<{}>", parts.join(", "))
            }
        }
        "parenthesized" => {
            let ins: Vec<String> = ids(&body["inputs"]).map(ty).collect();
            let out = if body["output"].is_null() {
                String::new()
            } else {
                format!(" -> {}", ty(&body["output"]))
            };
            format!("{name}({}){out}", ins.join(", "))
        }
        _ => name.to_string(),
    }
}

/// A type as written, compactly.
fn ty(t: &Value) -> String {
    let (k, v) = tag(t);
    match k {
        "resolved_path" => path_ty(v),
        "generic" | "primitive" => v.as_str().unwrap_or("?").to_string(),
        "borrowed_ref" => {
            let lt = v["lifetime"]
                .as_str()
                .map(|l| format!("{l} "))
                .unwrap_or_default();
            let m = if v["is_mutable"] == true { "mut " } else { "" };
            format!("&{lt}{m}{}", ty(&v["type"]))
        }
        "raw_pointer" => {
            let m = if v["is_mutable"] == true {
                "mut"
            } else {
                "const"
            };
            format!("*{m} {}", ty(&v["type"]))
        }
        "slice" => format!("[{}]", ty(v)),
        "array" => format!("[{}; {}]", ty(&v["type"]), v["len"].as_str().unwrap_or("_")),
        "tuple" => {
            let parts: Vec<String> = ids(v).map(ty).collect();
            format!("({})", parts.join(", "))
        }
        "impl_trait" => format!("impl {}", bounds(v)),
        "dyn_trait" => {
            let mut parts: Vec<String> = ids(&v["traits"]).map(|p| path_ty(&p["trait"])).collect();
            if let Some(l) = v["lifetime"].as_str() {
                parts.push(l.to_string());
            }
            format!("dyn {}", parts.join(" + "))
        }
        "qualified_path" => format!(
            "<{} as {}>::{}",
            ty(&v["self_type"]),
            path_ty(&v["trait"]),
            v["name"].as_str().unwrap_or("?")
        ),
        "function_pointer" => {
            let inputs: Vec<String> = ids(&v["sig"]["inputs"]).map(|p| ty(&p[1])).collect();
            let out = &v["sig"]["output"];
            let out = if out.is_null() {
                String::new()
            } else {
                format!(" -> {}", ty(out))
            };
            format!("fn({}){out}", inputs.join(", "))
        }
        "infer" => "_".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
