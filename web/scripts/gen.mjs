// Regenerates src/gen/ (TypeScript types of the v1 API) from proto/trainyard/v1/*.proto with
// Debian's protoc and the ts-proto plugin: types only, proto3 JSON shapes (camelCase, enums as
// strings, int64 as strings, Timestamps as RFC 3339 strings).
import { execFileSync } from 'node:child_process';
import { readdirSync, rmSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const web = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const protoRoot = resolve(web, '..', 'proto');
const out = join(web, 'src', 'gen');
const googleapis =
  process.env.GOOGLEAPIS_INCLUDE ?? '/usr/share/gocode/src/github.com/gogo/googleapis';
const protos = readdirSync(join(protoRoot, 'trainyard', 'v1'))
  .filter((f) => f.endsWith('.proto'))
  .map((f) => join('trainyard', 'v1', f));

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
execFileSync(
  process.env.PROTOC ?? 'protoc',
  [
    `--plugin=protoc-gen-ts_proto=${join(web, 'node_modules', '.bin', 'protoc-gen-ts_proto')}`,
    `--ts_proto_out=${out}`,
    '--ts_proto_opt=onlyTypes=true,snakeToCamel=true,useDate=string,stringEnums=true,forceLong=string,useOptionals=all,esModuleInterop=true,outputServices=false,useMapType=false,useJsonWireFormat=true',
    `-I${protoRoot}`,
    `-I${googleapis}`,
    ...protos,
  ],
  { stdio: 'inherit', cwd: protoRoot },
);
console.log(`generated ${protos.length} files into ${out}`);
