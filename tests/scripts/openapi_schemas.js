// openapi_schemas.js — turns the bundled OpenAPI document into standalone JSON Schema 2020-12
// files and a validation plan for tests/scripts/test_openapi.sh (which runs ajv on it).
//
//   node openapi_schemas.js BUNDLED_OPENAPI.json EXAMPLES_DIR OUT_DIR
//
// Writes OUT_DIR/schemas/<Name>.json (one per components.schemas entry: every schema under
// $defs, "$ref": "#/$defs/<Name>"), OUT_DIR/mutants/*.json (deliberately invalid bodies, which
// prove the schemas can reject), and OUT_DIR/plan.tsv: "schema <TAB> valid|invalid <TAB> file".
// Also checks proto/examples/index.json against the directory: every example file is listed,
// every listed file exists. Exits 1 with a message on any inconsistency.
"use strict";
const fs = require("fs");
const path = require("path");

function die(msg) {
    console.error("openapi_schemas: " + msg);
    process.exit(1);
}

const [bundledPath, examplesDir, outDir] = process.argv.slice(2);
if (!outDir) die("usage: node openapi_schemas.js BUNDLED.json EXAMPLES_DIR OUT_DIR");

const doc = JSON.parse(fs.readFileSync(bundledPath, "utf8"));
const schemas = (doc.components || {}).schemas;
if (!schemas || !Object.keys(schemas).length) die("no components.schemas in " + bundledPath);

// "#/components/schemas/X" -> "#/$defs/X", everywhere.
const defs = JSON.parse(
    JSON.stringify(schemas).replace(/"#\/components\/schemas\//g, '"#/$defs/'));
fs.mkdirSync(path.join(outDir, "schemas"), { recursive: true });
fs.mkdirSync(path.join(outDir, "mutants"), { recursive: true });
const schemaFile = (name) => {
    if (!schemas[name]) die("no schema " + name + " in components.schemas");
    return path.join(outDir, "schemas", name + ".json");
};
for (const name of Object.keys(schemas)) {
    const s = {
        $schema: "https://json-schema.org/draft/2020-12/schema",
        $id: "https://attnd.invalid/schemas/" + name + ".json",
        $ref: "#/$defs/" + name,
        $defs: defs,
    };
    fs.writeFileSync(schemaFile(name), JSON.stringify(s, null, 1));
}

// ------------------------------------------------------------------ the examples
const index = JSON.parse(fs.readFileSync(path.join(examplesDir, "index.json"), "utf8"));
if (index.format !== "attnd-examples" || index.version !== 1) die("index.json: unknown format");
const plan = [];
const listed = new Set(["index.json"]);
const exampleFile = (f) => {
    const p = path.join(examplesDir, f);
    if (!fs.existsSync(p)) die("index.json names a missing file: " + f);
    listed.add(f);
    return p;
};
const names = new Set();
for (const e of index.examples) {
    if (names.has(e.name)) die("index.json: duplicate example name " + e.name);
    names.add(e.name);
    if (!e.method || !e.path || !Number.isInteger(e.status)) die(e.name + ": method/path/status");
    if (e.request) {
        const p = exampleFile(e.request);
        if (e.request.endsWith(".json")) {
            if (typeof e.request_valid !== "boolean") die(e.name + ": request_valid missing");
            // request_schema: the v2 examples' InferRequest; /v1 ones leave it out.
            const schema = e.request_schema || "AttentionRequest";
            plan.push([schemaFile(schema), e.request_valid ? "valid" : "invalid", p]);
        }
    }
    if (e.response) {
        if (!e.response_schema) die(e.name + ": response_schema missing");
        plan.push([schemaFile(e.response_schema), "valid", exampleFile(e.response)]);
    } else if (!e.response_content_type) {
        die(e.name + ": neither response nor response_content_type");
    }
}
for (const f of fs.readdirSync(examplesDir)) {
    if (/\.(json|txt)$/.test(f) && !listed.has(f)) die("not in index.json: " + f);
}

// ------------------------------------------------------------------ mutants
// Each is a small change to a valid example that the schema must reject.
const read = (f) => JSON.parse(fs.readFileSync(path.join(examplesDir, f), "utf8"));
const single = read("self_single.request.json");
const batch = read("self_batch_ragged.request.json");
const resp = read("self_single.response.json");
const err = read("error_unknown_field.response.json");
const info = read("model_info.response.json");
const row = single.query[0];
const v2req = read("v2_infer_flat.request.json");
const v2resp = read("v2_infer_flat.response.json");
const v2in = v2req.inputs[0];
const mutants = {
    request: {
        unknown_field: { ...single, foo: 1 },
        need_weights_string: { ...single, need_weights: "true" },
        mask_mixed_types: { query: [row, row], attn_mask: [[false, 0.0], [0.0, false]] },
        timeout_negative: { ...single, timeout_ms: -5 },
        window_fraction: { ...single, window: 1.5 },
        id_too_long: { ...single, id: "x".repeat(128) },
        query_empty: { query: [] },
        query_row_empty: { query: [[]] },
        query_flat: { query: row },
        query_string_number: { query: [[...row.slice(1), "0.5"]] },
        query_overflows_float32: { query: [[...row.slice(1), 1e39]] },
        query_missing: { key: single.query },
        key_padding_mask_numbers: { query: [row, row], key_padding_mask: [0, 1] },
        batch_with_flat_padding_mask: { ...batch, key_padding_mask: [false, true] },
        batch_with_single_key: { ...batch, key: single.query },
        value_without_key: { ...single, value: single.query },
        average_weights_null: { ...single, average_attn_weights: null },
        not_an_object: [single],
    },
    response: {
        timing_missing: (({ timing, ...r }) => r)(resp),
        output_string: { ...resp, output: "0.5" },
        batch_size_zero: { ...resp, timing: { ...resp.timing, batch_size: 0 } },
    },
    error: {
        code_unknown: { error: { ...err.error, code: "oops" } },
        field_missing: { error: { code: err.error.code, message: err.error.message } },
        not_enveloped: err.error,
    },
    v2request: {
        unknown_member: { ...v2req, extra: 1 },
        inputs_missing: { id: v2req.id },
        input_unknown_name: { inputs: [{ ...v2in, name: "queries" }] },
        datatype_fp64: { inputs: [{ ...v2in, datatype: "FP64" }] },
        shape_zero: { inputs: [{ ...v2in, shape: [1, 0, 64] }] },
        data_string: { inputs: [{ ...v2in, data: ["0.5"] }] },
        parameter_unknown: { ...v2req, parameters: { is_casual: true } },
        output_unknown: { ...v2req, outputs: [{ name: "weights" }] },
    },
    v2response: {
        outputs_missing: (({ outputs, ...r }) => r)(v2resp),
        timing_missing: (({ parameters, ...r }) => r)(v2resp),
        datatype_bool: { ...v2resp, outputs: [{ ...v2resp.outputs[0], datatype: "BOOL" }] },
    },
    v2error: {
        v1_envelope: read("error_unknown_field.response.json"),
        not_a_string: { error: 5 },
    },
    info: {
        has_bias_missing: (({ has_bias, ...r }) => r)(info),
        loaded_at_not_a_date: { ...info, loaded_at: "yesterday" },
        heads_zero: { ...info, num_heads: 0 },
    },
};
const mutantSchema = { request: "AttentionRequest", response: "AttentionResponse",
                       error: "Error", info: "ModelInfo", v2request: "InferRequest",
                       v2response: "InferResponse", v2error: "V2Error" };
for (const [kind, cases] of Object.entries(mutants)) {
    for (const [name, body] of Object.entries(cases)) {
        const p = path.join(outDir, "mutants", kind + "_" + name + ".json");
        fs.writeFileSync(p, JSON.stringify(body));
        plan.push([schemaFile(mutantSchema[kind]), "invalid", p]);
    }
}

fs.writeFileSync(path.join(outDir, "plan.tsv"), plan.map((r) => r.join("\t")).join("\n") + "\n");
console.log(`openapi_schemas: ${Object.keys(schemas).length} schemas, ${plan.length} checks planned`);
