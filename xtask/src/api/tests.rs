use serde_json::json;

use super::{Listing, ty};

#[test]
fn api_types_render_as_written() {
    let table = [
        (json!({"primitive": "u8"}), "u8"),
        (
            json!({"borrowed_ref": {"lifetime": null, "is_mutable": false, "type": {"primitive": "str"}}}),
            "&str",
        ),
        (
            json!({"resolved_path": {"path": "std::option::Option", "id": 1, "args": {"angle_bracketed": {"args": [{"type": {"generic": "T"}}], "constraints": []}}}}),
            "Option<T>",
        ),
        (json!({"slice": {"primitive": "u8"}}), "[u8]"),
        (json!({"tuple": []}), "()"),
        (
            json!({"impl_trait": [{"trait_bound": {"trait": {"path": "Into", "id": 2, "args": {"angle_bracketed": {"args": [{"type": {"resolved_path": {"path": "String", "id": 3, "args": null}}}], "constraints": []}}}, "generic_params": [], "modifier": "none"}}]}),
            "impl Into<String>",
        ),
    ];
    for (t, want) in table {
        assert_eq!(ty(&t), want, "{t}");
    }
}

/// A crate root with a struct (one field, one method, a derived `Clone`), a re-exported
/// function and a public module: three root names, every item one line.
#[test]
fn api_listing_walks_from_the_root() {
    let unit = json!({"tuple": []});
    let doc = json!({
        "root": 0,
        "index": {
            "0": {"crate_id": 0, "name": "k", "visibility": "public", "attrs": [],
                  "inner": {"module": {"items": [1, 5, 7, 9]}}},
            "1": {"crate_id": 0, "name": "S", "visibility": "public", "attrs": ["non_exhaustive"],
                  "inner": {"struct": {"kind": {"plain": {"fields": [2]}},
                                       "generics": {"params": []}, "impls": [3, 10]}}},
            "2": {"crate_id": 0, "name": "a", "visibility": "public", "attrs": [],
                  "inner": {"struct_field": {"primitive": "u32"}}},
            "3": {"crate_id": 0, "name": null, "visibility": "default", "attrs": [],
                  "inner": {"impl": {"trait": null, "items": [4], "is_synthetic": false,
                                     "blanket_impl": null, "generics": {"params": []},
                                     "for": {"generic": "S"}}}},
            "4": {"crate_id": 0, "name": "get", "visibility": "public",
                  "attrs": [{"must_use": {"reason": null}}],
                  "inner": {"function": {"sig": {"inputs": [["self", {"borrowed_ref": {"lifetime": null, "is_mutable": false, "type": {"generic": "Self"}}}]],
                                                 "output": {"primitive": "u32"}},
                                         "generics": {"params": []}, "header": {}}}},
            "5": {"crate_id": 0, "name": null, "visibility": "public", "attrs": [],
                  "inner": {"use": {"source": "inner::f", "name": "f", "id": 6, "is_glob": false}}},
            "6": {"crate_id": 0, "name": "f", "visibility": "public", "attrs": [],
                  "inner": {"function": {"sig": {"inputs": [], "output": null},
                                         "generics": {"params": []}, "header": {"is_async": true}}}},
            "7": {"crate_id": 0, "name": "m", "visibility": "public", "attrs": [],
                  "inner": {"module": {"items": [8]}}},
            "8": {"crate_id": 0, "name": "C", "visibility": "public", "attrs": [],
                  "inner": {"constant": {"type": unit}}},
            "9": {"crate_id": 0, "name": "hidden", "visibility": "crate", "attrs": [],
                  "inner": {"function": {}}},
            "10": {"crate_id": 0, "name": null, "visibility": "default", "attrs": [],
                  "inner": {"impl": {"trait": {"path": "Clone", "id": 11, "args": null},
                                     "items": [], "is_synthetic": false, "blanket_impl": null,
                                     "generics": {"params": []}, "for": {"resolved_path": {"path": "S", "id": 1, "args": null}}}}}
        }
    });
    let listing = Listing::of(&doc).unwrap();
    assert_eq!(listing.root_items, 3);
    assert_eq!(
        listing.text(),
        "\
#[must_use] method k::S::get(&self) -> u32
#[non_exhaustive] struct k::S
const k::m::C: ()
field k::S::a: u32
fn k::f()  [async]
impl Clone for S
mod k::m
"
    );
}
