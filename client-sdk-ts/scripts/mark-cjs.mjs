// dist/cjs holds the CommonJS build; the package is "type": "module", so
// Node needs this marker to load the .js files under it with require().
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const dir = fileURLToPath(new URL("../dist/cjs/", import.meta.url));
writeFileSync(`${dir}package.json`, `${JSON.stringify({ type: "commonjs" })}\n`);
