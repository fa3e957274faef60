// Validates Prometheus operator and KEDA objects offline: reads a JSON array of objects on stdin
// and prints a JSON array with one entry per object: {index, kind, name, errors: [...]}.
//
// Two checks, both from the object's package, @kubernetes-models/prometheus-operator or
// @kubernetes-models/keda (generated from the projects' Go API types; versions and sources in
// SCHEMAS.md):
//   - the package's compiled JSON-schema validator: types, required fields, enums, patterns,
//     lengths (what the CRD's openAPIV3Schema checks);
//   - the package's TypeScript interfaces, compiled with TypeScript's excess-property check:
//     a field the API does not define is an error, as `kubectl apply` (server-side field
//     validation "Strict") reports it. The schema validator alone lets unknown fields through.
// Exit status: 0 when every object is valid, 1 when any is not, 2 on bad input.

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { PodMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";
import { ScaledObject } from "@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject";

// "apiVersion kind" -> the package's class, and the module its TypeScript interface is in.
const PROMETHEUS = "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
const MODELS = {
  "monitoring.coreos.com/v1 PodMonitor": [PodMonitor, `${PROMETHEUS}/PodMonitor`],
  "monitoring.coreos.com/v1 PrometheusRule": [PrometheusRule, `${PROMETHEUS}/PrometheusRule`],
  "monitoring.coreos.com/v1 ServiceMonitor": [ServiceMonitor, `${PROMETHEUS}/ServiceMonitor`],
  "keda.sh/v1alpha1 ScaledObject": [ScaledObject, "@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject"],
};
const modelOf = (object) => MODELS[`${object?.apiVersion} ${object?.kind}`];
const HERE = path.dirname(fileURLToPath(import.meta.url));

function schemaErrors(object) {
  try {
    new (modelOf(object)[0])(object).validate();
    return [];
  } catch (error) {
    if (!Array.isArray(error.errors)) throw error;
    return [...new Set(error.errors.map((e) => `schema: ${e.instancePath || "/"} ${e.message}`))];
  }
}

// One line per object, so a diagnostic's line says which object it is about.
function typeErrors(objects) {
  const header = Object.values(MODELS).map(([model, module], index) =>
    `import type { I${model.name} as T${index} } from "${module}";`);
  const types = Object.values(MODELS);
  const lines = objects.map((object, index) =>
    `export const object${index}: T${types.indexOf(modelOf(object))} = ${JSON.stringify(object)};`);
  // A virtual file beside node_modules, so the package's types resolve as they do for its users.
  const file = path.join(HERE, "__rendered_objects__.ts");
  const source = [...header, ...lines].join("\n") + "\n";
  const options = {
    strict: true, noEmit: true, skipLibCheck: true, types: [],
    target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
  };
  const host = ts.createCompilerHost(options);
  const readFile = host.readFile.bind(host);
  const getSourceFile = host.getSourceFile.bind(host);
  host.fileExists = ((exists) => (name) => name === file || exists(name))(host.fileExists.bind(host));
  host.readFile = (name) => (name === file ? source : readFile(name));
  host.getSourceFile = (name, language, ...rest) =>
    name === file ? ts.createSourceFile(name, source, language) : getSourceFile(name, language, ...rest);
  const program = ts.createProgram([file], options, host);
  const byObject = objects.map(() => []);
  for (const diagnostic of ts.getPreEmitDiagnostics(program)) {
    const text = ts.flattenDiagnosticMessageText(diagnostic.messageText, " ");
    if (diagnostic.file?.fileName !== file) {
      throw new Error(`the package's types do not compile: ${text}`);
    }
    const { line } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start);
    const index = line - header.length;
    if (index < 0) throw new Error(`the package's types do not load: ${text}`);
    byObject[index].push(`fields: ${pathAt(diagnostic.file, diagnostic.start)} ${text}`);
  }
  return byObject;
}

// The JSON pointer of the property or element at `position` in the file's object literals.
function pathAt(sourceFile, position) {
  const parts = [];
  let node = sourceFile.statements.find((s) => s.pos <= position && position < s.end);
  node = node?.declarationList?.declarations[0]?.initializer;
  for (;;) {
    if (ts.isObjectLiteralExpression(node)) {
      const property = node.properties.find((p) => p.pos <= position && position < p.end);
      if (!property) break;
      parts.push(property.name.text);
      node = property.initializer;
    } else if (ts.isArrayLiteralExpression(node)) {
      const index = node.elements.findIndex((e) => e.pos <= position && position < e.end);
      if (index < 0) break;
      parts.push(String(index));
      node = node.elements[index];
    } else {
      break;
    }
  }
  return "/" + parts.join("/");
}

function main() {
  let objects;
  try {
    objects = JSON.parse(fs.readFileSync(0, "utf8"));
  } catch (error) {
    console.error(`validate.mjs: stdin is not JSON: ${error.message}`);
    return 2;
  }
  if (!Array.isArray(objects)) {
    console.error("validate.mjs: stdin must hold a JSON array of objects");
    return 2;
  }
  const known = objects.map((o) => modelOf(o) !== undefined);
  const typed = typeErrors(objects.filter((_, index) => known[index]));
  let next = 0;
  const results = objects.map((object, index) => {
    const entry = { index, kind: object?.kind ?? null, name: object?.metadata?.name ?? null };
    if (!known[index]) {
      return { ...entry, errors: [`not one of ${Object.keys(MODELS).join(", ")}`] };
    }
    return { ...entry, errors: [...schemaErrors(object), ...typed[next++]] };
  });
  process.stdout.write(JSON.stringify(results, null, 1) + "\n");
  return results.some((r) => r.errors.length) ? 1 : 0;
}

process.exitCode = main();
