#!/usr/bin/env node
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// Offline validation of Kubernetes manifests against the official API
// schemas shipped by the npm package kubernetes-models (its raw OpenAPI
// definitions, compiled here with its own Ajv), made strict: every object
// schema that lists its properties rejects any other key, as
// `kubectl --validate=strict` would, so a typo such as `contaners` is an
// error instead of a field the API server silently drops.
//
//   node validate.mjs FILE...                 validate every document
//   node validate.mjs --get KIND/NAME PATH FILE...
//                                             print one value as JSON
//
// PATH is dotted, with [N] for an index and [key=value] to pick the list
// element whose key has that value, e.g.
//   spec.template.spec.containers[name=kthrottled].volumeMounts[mountPath=/sys/fs/bpf].mountPropagation
//
// Output, one line per problem: FILE: DOCINDEX KIND/NAME: PATH: problem
// Exit 0 ("N objects valid"), 1 on any problem, 2 on usage errors.

import { createRequire } from "node:module";
import { readFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import YAML from "yaml";
import Ajv from "ajv";
import addFormats from "ajv-formats";

const require = createRequire(import.meta.url);

// Each model's addSchema() hands its raw OpenAPI schema, by id, to
// register() of @kubernetes-models/validate, which compiles it leniently.
// Wrapping that export collects the raw schemas instead; they are compiled
// strict here. The models call it through the module object at call time,
// so the wrapper sees every schema of the one hoisted copy (package-lock).
const kmValidate = require("@kubernetes-models/validate");
const rawSchemas = new Map();
const lenientRegister = kmValidate.register;
kmValidate.register = (id, schema) => {
	if (!rawSchemas.has(id)) rawSchemas.set(id, schema);
	return lenientRegister(id, schema);
};
if (kmValidate.register === lenientRegister) {
	console.error("validate.mjs: cannot hook @kubernetes-models/validate's register (version changed?)");
	process.exit(2);
}

const strictAjv = new Ajv({ strictTypes: false, allErrors: true, verbose: true });
addFormats(strictAjv);
// The two OpenAPI formats of the Kubernetes schemas that ajv-formats lacks.
strictAjv.addFormat("byte", /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/);
// resource.Quantity: a signed decimal, then a binary-SI, decimal-SI or
// exponent suffix (100m, 1.5Gi, 2e3)
strictAjv.addFormat("quantity", /^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$/);
const copied = new Set();

function strictify(node) {
	if (Array.isArray(node)) {
		node.forEach(strictify);
		return;
	}
	if (!node || typeof node !== "object") return;
	if (node.properties && node.additionalProperties === undefined &&
	    !node["x-kubernetes-preserve-unknown-fields"])
		node.additionalProperties = false;
	for (const key of ["properties", "patternProperties", "definitions"])
		if (node[key]) Object.values(node[key]).forEach(strictify);
	for (const key of ["items", "additionalProperties", "allOf", "anyOf", "oneOf", "not"])
		if (node[key] && typeof node[key] === "object") strictify(node[key]);
}

// Copies every schema registered so far into the strict instance.
function syncSchemas() {
	for (const [id, schema] of rawSchemas) {
		if (copied.has(id)) continue;
		const s = structuredClone(schema);
		strictify(s);
		strictAjv.addSchema(s, id);
		copied.add(id);
	}
}

// The model class for apiVersion/kind, or null. The module path follows the
// package's layout: kubernetes-models/<group>/<version>/<Kind>.
function modelFor(apiVersion, kind) {
	if (typeof apiVersion !== "string" || typeof kind !== "string" ||
	    !/^[a-z0-9.-]*\/?v[0-9a-z]+$/.test(apiVersion) || !/^[A-Z][A-Za-z0-9]*$/.test(kind))
		return null;
	let mod;
	try {
		mod = require(`kubernetes-models/${apiVersion}/${kind}`);
	} catch {
		return null;
	}
	const cls = mod[kind];
	if (!cls || cls.apiVersion !== apiVersion || cls.kind !== kind) return null;
	return cls;
}

function knownGroupVersion(apiVersion) {
	if (typeof apiVersion !== "string" || !/^[a-z0-9.-]*\/?v[0-9a-z]+$/.test(apiVersion)) return false;
	try {
		require(`kubernetes-models/${apiVersion}`);
		return true;
	} catch {
		return false;
	}
}

// setSchema() keeps the schema id and its registration function on the
// prototype under private symbols: the string is the id, the function adds it.
function schemaIdOf(cls) {
	let id = null, add = null;
	for (const sym of Object.getOwnPropertySymbols(cls.prototype)) {
		const v = cls.prototype[sym];
		if (typeof v === "string") id = v;
		else if (typeof v === "function") add = v;
	}
	if (add) add();
	return id;
}

function showPath(ptr) {
	let out = "";
	for (const raw of ptr.split("/").slice(1)) {
		const seg = raw.replace(/~1/g, "/").replace(/~0/g, "~");
		out += /^[0-9]+$/.test(seg) ? `[${seg}]` : (out ? "." : "") + seg;
	}
	return out;
}

function join2(path, key) {
	return path ? `${path}.${key}` : key;
}

// A $ref that may be null is written oneOf [{$ref}, {type: null}]; when the
// value fails the $ref, the errors of the $ref branch say why, and the two
// oneOf errors only repeat it.
function dropNullableNoise(errors) {
	const skip = new Set();
	const out = [];
	for (const e of errors) {
		if (e.keyword === "oneOf" && Array.isArray(e.schema)) {
			const i = e.schema.findIndex((s) => s && s.type === "null");
			if (i >= 0) {
				skip.add(`${e.schemaPath}/${i}/type`);
				continue;
			}
		}
		out.push(e);
	}
	return out.filter((e) => !skip.has(e.schemaPath));
}

function describe(e) {
	const path = showPath(e.instancePath);
	switch (e.keyword) {
	case "additionalProperties":
		return [join2(path, e.params.additionalProperty), "unknown field"];
	case "required":
		return [join2(path, e.params.missingProperty), "required field missing"];
	case "type":
		return [path, `must be ${e.params.type}, not ${JSON.stringify(e.data)}`];
	case "enum":
		return [path, `must be one of ${e.params.allowedValues.join(", ")}`];
	default:
		return [path, e.message];
	}
}

// kustomization.yaml is read by kubectl -k, not sent to the API server: check
// the keys this directory uses and that every listed resource exists.
const KUSTOMIZE_KEYS = new Set(["apiVersion", "kind", "resources", "namespace", "labels",
				"commonLabels", "commonAnnotations", "images", "configMapGenerator",
				"generatorOptions", "patches"]);

function checkKustomization(file, obj, report) {
	for (const k of Object.keys(obj))
		if (!KUSTOMIZE_KEYS.has(k)) report(k, "unknown field");
	if (!Array.isArray(obj.resources) || obj.resources.length === 0) {
		report("resources", "must be a non-empty list");
		return;
	}
	obj.resources.forEach((r, i) => {
		if (typeof r !== "string" || !existsSync(join(dirname(file), r)))
			report(`resources[${i}]`, `${JSON.stringify(r)} does not exist next to the file`);
	});
}

// Embedded configuration files (kthrottled.yaml) must at least parse.
function checkConfigMapData(obj, report) {
	for (const [key, text] of Object.entries(obj.data || {})) {
		if (!/\.ya?ml$/.test(key) || typeof text !== "string") continue;
		const doc = YAML.parseDocument(text, { uniqueKeys: true });
		for (const err of doc.errors)
			report(`data.${key}`, `embedded YAML: ${err.message.split("\n")[0].replace(/:$/, "")}`);
		if (!doc.errors.length && (doc.contents === null || !YAML.isMap(doc.contents)))
			report(`data.${key}`, "embedded YAML is not a mapping");
	}
}

function loadDocs(file, problems) {
	let text;
	try {
		text = readFileSync(file, "utf8");
	} catch (e) {
		problems.push(`${file}: cannot read: ${e.message}`);
		return [];
	}
	const docs = YAML.parseAllDocuments(text, { uniqueKeys: true });
	const out = [];
	docs.forEach((doc, i) => {
		for (const err of doc.errors)
			problems.push(`${file}: ${i} ?/?: (document): YAML: ${err.message.split("\n")[0].replace(/:$/, "")}`);
		if (doc.errors.length) return;
		const obj = doc.toJS();
		if (obj !== null && obj !== undefined) out.push({ index: i, obj });
	});
	return out;
}

function label(obj) {
	const kind = obj && typeof obj.kind === "string" ? obj.kind : "?";
	const name = obj && obj.metadata && typeof obj.metadata.name === "string" ? obj.metadata.name : "?";
	return `${kind}/${name}`;
}

function validateFiles(files) {
	const problems = [];
	let valid = 0;

	for (const file of files) {
		for (const { index, obj } of loadDocs(file, problems)) {
			const where = `${file}: ${index} ${label(obj)}`;
			const before = problems.length;
			const report = (path, msg) => problems.push(`${where}: ${path}: ${msg}`);

			if (typeof obj !== "object" || Array.isArray(obj)) {
				report("", "document is not a mapping");
				continue;
			}
			if (obj.apiVersion === "kustomize.config.k8s.io/v1beta1" && obj.kind === "Kustomization") {
				checkKustomization(file, obj, report);
			} else {
				const cls = modelFor(obj.apiVersion, obj.kind);
				if (!cls) {
					report(knownGroupVersion(obj.apiVersion) ? "kind" : "apiVersion",
					       `no Kubernetes API type ${JSON.stringify(obj.kind)} in ${JSON.stringify(obj.apiVersion)}`);
					continue;
				}
				const id = schemaIdOf(cls);
				syncSchemas();
				let ok;
				try {
					ok = strictAjv.validate(id, obj);
				} catch (e) {
					report("", `schema ${id}: ${e.message}`);
					continue;
				}
				if (!ok)
					for (const e of dropNullableNoise(strictAjv.errors || []))
						report(...describe(e));
				if (obj.kind === "ConfigMap") checkConfigMapData(obj, report);
			}
			if (problems.length === before) valid++;
		}
	}
	for (const p of problems) console.log(p);
	if (problems.length) {
		console.log(`${problems.length} problem(s)`);
		return 1;
	}
	console.log(`${valid} objects valid`);
	return 0;
}

function get(value, path) {
	const re = /([^.[\]]+)|\[([^\]]*)\]/g;
	let m;
	while ((m = re.exec(path))) {
		if (value === undefined || value === null) return undefined;
		if (m[1] !== undefined) {
			value = value[m[1]];
		} else if (/^[0-9]+$/.test(m[2])) {
			value = Array.isArray(value) ? value[Number(m[2])] : undefined;
		} else {
			const eq = m[2].indexOf("=");
			const k = m[2].slice(0, eq), v = m[2].slice(eq + 1);
			value = Array.isArray(value) ? value.find((x) => x && String(x[k]) === v) : undefined;
		}
	}
	return value;
}

function query(target, path, files) {
	const problems = [];
	for (const file of files)
		for (const { obj } of loadDocs(file, problems))
			if (label(obj) === target) {
				const v = get(obj, path);
				console.log(v === undefined ? "undefined" : JSON.stringify(v));
				return v === undefined ? 1 : 0;
			}
	for (const p of problems) console.log(p);
	console.log(`${target}: not found`);
	return 1;
}

const args = process.argv.slice(2);
if (args[0] === "--get") {
	if (args.length < 4) {
		console.error("usage: validate.mjs --get KIND/NAME PATH FILE...");
		process.exit(2);
	}
	process.exit(query(args[1], args[2], args.slice(3)));
}
if (!args.length || args[0].startsWith("-")) {
	console.error("usage: validate.mjs FILE... | --get KIND/NAME PATH FILE...");
	process.exit(2);
}
process.exit(validateFiles(args));
