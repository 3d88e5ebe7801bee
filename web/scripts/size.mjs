// Gzips every file of dist/assets and fails if the total is over the budget (500 KiB).
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const budget = 500 * 1024;
const assets = resolve(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'assets');
let files;
try {
  files = readdirSync(assets);
} catch {
  console.error(`size: ${assets} is missing; run npm run build first`);
  process.exit(1);
}
let total = 0;
for (const f of files.sort()) {
  const p = join(assets, f);
  if (!statSync(p).isFile()) continue;
  const raw = readFileSync(p);
  const gz = gzipSync(raw, { level: 9 }).length;
  total += gz;
  console.log(`${f.padEnd(40)} ${String(raw.length).padStart(9)} B  ${String(gz).padStart(8)} B gzip`);
}
const kib = (total / 1024).toFixed(1);
console.log(`total gzip: ${total} B (${kib} KiB) of ${budget / 1024} KiB budget`);
if (total > budget) {
  console.error('size: over budget');
  process.exit(1);
}
