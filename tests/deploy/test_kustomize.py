"""The Kubernetes manifests of deploy/kubernetes/ (docs/kubernetes.md, "Deploying Trainyard in
a cluster"): base and every overlay rendered with `kubectl kustomize`, each object validated
against the strict v1.30 schema of its kind, the dispatcher's RBAC compared with the requests
the adapter makes (a list written here by hand from kube_adapter.cc), service account tokens,
the dispatcher's flags and its settings file, and each overlay's ApplyBundle.

Run: /usr/bin/python3 -m pytest -q tests/deploy. Needs kubectl (deploy/install-deps.sh installs
Debian's kubernetes-client when there is none) and python3-yaml, python3-jsonschema; the schema
checks need ../shared/k8s-schema/v1.30 (or TRAINYARD_K8S_SCHEMAS) and are skipped without it.
"""

import copy
import functools
import os
import posixpath
import re
import shutil
import subprocess
import sys

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, '..', '..'))
DEPLOY = os.path.join(REPO, 'deploy', 'kubernetes')
SCHEMAS = os.environ.get('TRAINYARD_K8S_SCHEMAS') or os.path.join(
    REPO, '..', 'shared', 'k8s-schema', 'v1.30')
KUBE_DIR = os.path.join(REPO, 'services', 'dispatcher', 'adapters', 'kubernetes')

# The schema loader of the Kubernetes API test server (by apiVersion and kind).
sys.path.insert(0, os.path.join(REPO, 'tests', 'fixtures', 'kube_apiserver'))
import kube  # noqa: E402

DISPATCHER_SA = 'trainyard-dispatcher'


def kustomizations():
    out = ['base']
    overlays = os.path.join(DEPLOY, 'overlays')
    for name in sorted(os.listdir(overlays)):
        if os.path.isfile(os.path.join(overlays, name, 'kustomization.yaml')):
            out.append('overlays/' + name)
    return out


KUSTOMIZATIONS = kustomizations()
OVERLAYS = [k for k in KUSTOMIZATIONS if k.startswith('overlays/')]


@functools.lru_cache(maxsize=None)
def render(kustomization):
    """The objects `kubectl kustomize` renders from deploy/kubernetes/<kustomization>."""
    kubectl = shutil.which('kubectl')
    if kubectl is None:
        pytest.fail('kubectl is not installed: the manifests cannot be rendered (CI installs it '
                    'with deploy/install-deps.sh, Debian package kubernetes-client)')
    run = subprocess.run([kubectl, 'kustomize', os.path.join(DEPLOY, kustomization)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, 'kubectl kustomize %s failed:\n%s' % (kustomization, run.stderr)
    docs = [d for d in yaml.safe_load_all(run.stdout) if d is not None]
    assert docs, 'kubectl kustomize %s rendered nothing' % kustomization
    return docs


def objects(docs, kind):
    return [d for d in docs if d.get('kind') == kind]


def one(docs, kind, name):
    found = [d for d in objects(docs, kind) if d['metadata']['name'] == name]
    assert len(found) == 1, '%d %s named %s' % (len(found), kind, name)
    return found[0]


def pod_templates(docs):
    """(object, pod spec) of every workload."""
    out = []
    for d in docs:
        if d['kind'] in ('Deployment', 'Job'):
            out.append((d, d['spec']['template']['spec']))
    return out


def dispatcher(docs):
    """The dispatcher's Deployment, its pod spec and its container."""
    found = []
    for obj, spec in pod_templates(docs):
        for c in spec['containers']:
            if (c.get('args') or [None])[0] == 'dispatcher':
                found.append((obj, spec, c))
    assert len(found) == 1, 'expected one container running `trainyard dispatcher`, got %d' % (
        len(found))
    return found[0]


def flag(args, name):
    values = [a.split('=', 1)[1] for a in args if a.startswith('--%s=' % name)]
    assert len(values) <= 1, '--%s given %d times' % (name, len(values))
    return values[0] if values else None


# ---------------------------------------------------------------- schemas

def pvc_schema(schemas):
    """PersistentVolumeClaim has no schema file in the shared set. Its schema is composed from
    v1.30's own pieces there: the PersistentVolumeClaimTemplate inside pod-v1.json holds the same
    ObjectMeta and PersistentVolumeClaimSpec definitions a PersistentVolumeClaim has (strict,
    unknown fields refused); apiVersion and kind are fixed, and a manifest sets no status."""
    pod = schemas.raw[('v1', 'Pod')]
    template = (pod['properties']['spec']['properties']['volumes']['items']['properties']
                ['ephemeral']['properties']['volumeClaimTemplate'])
    return {
        'type': 'object',
        'additionalProperties': False,
        'required': ['apiVersion', 'kind', 'metadata', 'spec'],
        'properties': {
            'apiVersion': {'enum': ['v1']},
            'kind': {'enum': ['PersistentVolumeClaim']},
            'metadata': copy.deepcopy(template['properties']['metadata']),
            'spec': copy.deepcopy(template['properties']['spec']),
        },
    }


@functools.lru_cache(maxsize=None)
def load_schemas():
    if not os.path.isdir(SCHEMAS):
        pytest.skip('no Kubernetes schemas at %s (the shared/ checkout next to the repository, '
                    'or TRAINYARD_K8S_SCHEMAS)' % SCHEMAS)
    return kube.Schemas(SCHEMAS)


def validator(schemas, api_version, kind):
    import jsonschema
    v = schemas.validator(api_version, kind)
    if v is None and (api_version, kind) == ('v1', 'PersistentVolumeClaim'):
        assert schemas.has('v1', 'Pod'), 'pod-v1.json is missing from %s' % SCHEMAS
        return jsonschema.Draft4Validator(pvc_schema(schemas))
    return v


@pytest.mark.parametrize('kustomization', KUSTOMIZATIONS)
def test_every_object_validates_against_its_strict_schema(kustomization):
    schemas = load_schemas()
    problems = []
    for d in render(kustomization):
        what = '%s %s/%s' % (d.get('kind'), d.get('metadata', {}).get('namespace', ''),
                             d.get('metadata', {}).get('name'))
        v = validator(schemas, d.get('apiVersion'), d.get('kind'))
        if v is None:
            problems.append('%s: no schema for apiVersion %s kind %s in %s' % (
                what, d.get('apiVersion'), d.get('kind'), SCHEMAS))
            continue
        for e in v.iter_errors(d):
            problems.append('%s: %s: %s' % (what, kube.field_path(list(e.absolute_path)),
                                            e.message[:300]))
    assert not problems, '\n'.join(problems)


def test_strict_validation_refuses_unknown_fields():
    """The validation above is strict: a field Kubernetes does not know is an error, as the API
    server's fieldValidation=Strict makes it."""
    schemas = load_schemas()
    docs = render('base')
    deployment = copy.deepcopy(dispatcher(docs)[0])
    deployment['spec']['template']['spec']['containers'][0]['livenessProbe']['httpGett'] = {}
    errors = list(validator(schemas, 'apps/v1', 'Deployment').iter_errors(deployment))
    assert any("'httpGett'" in e.message for e in errors), [e.message for e in errors]
    pvc = copy.deepcopy(one(docs, 'PersistentVolumeClaim', 'trainyard-checkpoints'))
    pvc['spec']['accesModes'] = ['ReadWriteMany']
    errors = list(validator(schemas, 'v1', 'PersistentVolumeClaim').iter_errors(pvc))
    assert any("'accesModes'" in e.message for e in errors), [e.message for e in errors]


# ---------------------------------------------------------------- RBAC

# What the dispatcher's adapter asks the API server (services/dispatcher/adapters/kubernetes/
# kube_adapter.cc and the informers of kube_watch.cc), written out by hand:
#   (apiGroup, resource, verb, scope), scope 'namespace' = the job namespace, 'cluster' = all.
EXPECTED_GRANTS = {
    # The Job informer: list + watch of /apis/batch/v1/namespaces/NS/jobs (KubernetesAdapter::
    # Create; Status, List and Stop read its cache).
    ('batch', 'jobs', 'list', 'namespace'),
    ('batch', 'jobs', 'watch', 'namespace'),
    # FindJob's GET when the cache has not seen the Job (Launch, Stop, Status, Delete, ReadLog),
    # and Launch reading back a Job whose create answered AlreadyExists.
    ('batch', 'jobs', 'get', 'namespace'),
    # Launch: POST the Job.
    ('batch', 'jobs', 'create', 'namespace'),
    # Stop: merge patch of the stop annotations and spec.suspend.
    ('batch', 'jobs', 'patch', 'namespace'),
    # Delete: DELETE the Job (propagationPolicy Background).
    ('batch', 'jobs', 'delete', 'namespace'),
    # Launch: POST the headless Service; Delete: DELETE it.
    ('', 'services', 'create', 'namespace'),
    ('', 'services', 'delete', 'namespace'),
    # Stop: DELETE each pod with the grace period.
    ('', 'pods', 'delete', 'namespace'),
    # ReadLog: GET pods/NAME/log.
    ('', 'pods/log', 'get', 'namespace'),
    # The pod informer: every pod of the cluster (/api/v1/pods), others' pods counting against
    # their node (Inventory).
    ('', 'pods', 'list', 'cluster'),
    ('', 'pods', 'watch', 'cluster'),
    # The node informer (/api/v1/nodes): Inventory.
    ('', 'nodes', 'list', 'cluster'),
    ('', 'nodes', 'watch', 'cluster'),
}

# The requests EXPECTED_GRANTS was written from: KubeClient methods the adapter calls, and the
# collections its informers watch.
ADAPTER_CLIENT_CALLS = {'Get', 'Create', 'Patch', 'Delete', 'GetText'}
ADAPTER_INFORMER_PATHS = {'"/apis/batch/v1/namespaces/", ns, "/jobs"', '"/api/v1/pods"',
                          '"/api/v1/nodes"'}


def test_adapter_requests_are_the_ones_the_rbac_expectation_was_written_from():
    with open(os.path.join(KUBE_DIR, 'kube_adapter.cc')) as f:
        source = f.read()
    calls = set(re.findall(r'client_->(\w+)\(', source))
    informers = set(re.findall(
        r'make_unique<Informer>\(\s*a->client_\.get\(\),\s*(?:domain::Cat\()?(.*?)\)?,'
        r'\s*(?:\w+_options|a->options_)',
        source, re.S))
    informers = {re.sub(r'\s+', ' ', i).strip() for i in informers}
    assert calls == ADAPTER_CLIENT_CALLS and informers == ADAPTER_INFORMER_PATHS, (
        'the Kubernetes adapter makes other requests than the RBAC was derived from '
        '(client calls %s, informers %s): review deploy/kubernetes/base/rbac.yaml, '
        'EXPECTED_GRANTS here and docs/kubernetes.md "RBAC"' % (sorted(calls), sorted(informers)))


def granted(docs, subject_namespace, subject_name):
    """(apiGroup, resource, verb, scope) the roles bound to a ServiceAccount grant, and the
    namespaces of its namespaced grants."""
    out = set()
    namespaces = set()

    def bound(binding):
        return any(s.get('kind') == 'ServiceAccount' and s.get('name') == subject_name and
                   s.get('namespace') == subject_namespace for s in binding.get('subjects') or [])

    def rules(ref, binding_namespace):
        kind = ref['kind']
        if kind == 'Role':
            role = [r for r in objects(docs, 'Role') if r['metadata']['name'] == ref['name'] and
                    r['metadata'].get('namespace') == binding_namespace]
        else:
            role = [r for r in objects(docs, 'ClusterRole') if r['metadata']['name'] == ref['name']]
        assert len(role) == 1, 'the binding names %s %s, which is not in the manifests' % (
            kind, ref['name'])
        return role[0].get('rules') or []

    for b in objects(docs, 'RoleBinding') + objects(docs, 'ClusterRoleBinding'):
        if not bound(b):
            continue
        ns = b['metadata'].get('namespace') if b['kind'] == 'RoleBinding' else None
        scope = 'namespace' if ns else 'cluster'
        if ns:
            namespaces.add(ns)
        for rule in rules(b['roleRef'], ns):
            assert not rule.get('nonResourceURLs'), rule
            assert not rule.get('resourceNames'), rule
            for group in rule.get('apiGroups') or []:
                for resource in rule.get('resources') or []:
                    for verb in rule.get('verbs') or []:
                        out.add((group, resource, verb, scope))
    return out, namespaces


@pytest.mark.parametrize('kustomization', KUSTOMIZATIONS)
def test_dispatcher_rbac_is_exactly_what_the_adapter_needs(kustomization):
    docs = render(kustomization)
    obj, spec, _ = dispatcher(docs)
    ns = obj['metadata']['namespace']
    assert spec['serviceAccountName'] == DISPATCHER_SA
    grants, namespaces = granted(docs, ns, DISPATCHER_SA)
    wildcards = {g for g in grants if '*' in g[:3]}
    assert not wildcards, 'wildcard grants: %s' % sorted(wildcards)
    assert grants == EXPECTED_GRANTS, (
        'granted but not needed: %s\nneeded but not granted: %s' % (
            sorted(grants - EXPECTED_GRANTS), sorted(EXPECTED_GRANTS - grants)))
    # Namespaced grants hold in the job namespace, the settings' `namespace`.
    assert namespaces == {settings_of(docs)['namespace'][0]}


@pytest.mark.parametrize('kustomization', KUSTOMIZATIONS)
def test_only_the_dispatcher_is_bound_to_any_role(kustomization):
    docs = render(kustomization)
    bindings = objects(docs, 'RoleBinding') + objects(docs, 'ClusterRoleBinding')
    assert bindings, 'no RoleBinding or ClusterRoleBinding rendered'
    for b in bindings:
        subjects = [(s.get('kind'), s.get('name')) for s in b.get('subjects') or []]
        assert subjects == [('ServiceAccount', DISPATCHER_SA)], (b['metadata']['name'], subjects)
    roles = objects(docs, 'Role') + objects(docs, 'ClusterRole')
    referenced = {(b['roleRef']['kind'], b['roleRef']['name']) for b in bindings}
    assert {(r['kind'], r['metadata']['name']) for r in roles} == referenced


@pytest.mark.parametrize('kustomization', KUSTOMIZATIONS)
def test_no_pod_but_the_dispatcher_mounts_a_service_account_token(kustomization):
    docs = render(kustomization)
    accounts = {(sa['metadata']['namespace'], sa['metadata']['name']): sa
                for sa in objects(docs, 'ServiceAccount')}
    templates = pod_templates(docs)
    assert len(templates) >= 6, [o['metadata']['name'] for o, _ in templates]
    for obj, spec in templates:
        name = obj['metadata']['name']
        sa_name = spec.get('serviceAccountName')
        assert sa_name and sa_name != 'default', '%s runs as the default ServiceAccount' % name
        sa = accounts.get((obj['metadata']['namespace'], sa_name))
        assert sa is not None, '%s: ServiceAccount %s is not in the manifests' % (name, sa_name)
        mounts = spec.get('automountServiceAccountToken')
        if mounts is None:
            mounts = sa.get('automountServiceAccountToken', True)
        assert mounts == (sa_name == DISPATCHER_SA), '%s: automount token %s' % (name, mounts)
    # Every ServiceAccount but the dispatcher's refuses tokens for pods that do not say.
    for (ns, sa_name), sa in accounts.items():
        assert sa.get('automountServiceAccountToken', True) == (sa_name == DISPATCHER_SA), sa_name
    # The training pods' account (settings service_account) is one of them.
    workers = settings_of(docs).get('service_account')
    assert workers, 'the settings name no service_account: training pods would run as default'
    assert accounts[(settings_of(docs)['namespace'][0], workers[0])][
        'automountServiceAccountToken'] is False


@pytest.mark.parametrize('kustomization', KUSTOMIZATIONS)
def test_every_container_runs_the_trainyard_image_with_probes(kustomization):
    docs = render(kustomization)
    for obj, spec in pod_templates(docs):
        for c in spec['containers']:
            # One name, so that kustomize `images:` replaces every one.
            assert c['image'] == 'trainyard', (obj['metadata']['name'], c['image'])
            assert c['securityContext']['readOnlyRootFilesystem'] is True
            assert c['securityContext']['allowPrivilegeEscalation'] is False
            if obj['kind'] == 'Job':
                continue
            # The services' health endpoints (docs/operations.md, "Observability").
            ports = {p['name']: p['containerPort'] for p in c['ports']}
            for probe, path in (('livenessProbe', '/healthz'), ('readinessProbe', '/readyz'),
                                ('startupProbe', '/healthz')):
                get = c[probe]['httpGet']
                assert get['path'] == path, (obj['metadata']['name'], probe)
                port = ports[get['port']]
                listen = flag(c['args'], 'gateway_listen' if c['args'][0] == 'gateway'
                              else 'http_listen')
                assert listen == '0.0.0.0:%d' % port, (obj['metadata']['name'], listen, port)
        assert spec['securityContext']['runAsNonRoot'] is True


def test_the_migrate_job_runs_trainyard_migrate():
    docs = render('base')
    job = one(docs, 'Job', 'trainyard-migrate')
    c = job['spec']['template']['spec']['containers'][0]
    assert c['args'][0] == 'migrate'
    assert flag(c['args'], 'config') == '/etc/trainyard/secret/database.conf'


# ---------------------------------------------------------------- the dispatcher's settings

def known_settings():
    """The keys ParseKubernetesSettings (kube_settings.cc) accepts: `key == "..."`, and the
    flavor settings `flavor.<id>.<what>` with `what == "..."`."""
    with open(os.path.join(KUBE_DIR, 'kube_settings.cc')) as f:
        source = f.read()
    parser = source[source.index('ParseKubernetesSettings('):]
    keys = set(re.findall(r'\bkey == "([a-z_]+)"', parser))
    flavor = set(re.findall(r'\bwhat == "([a-z_]+)"', parser))
    assert 'namespace' in keys and 'checkpoint_volume' in keys and 'spot' in flavor, (
        'kube_settings.cc no longer reads as this test expects')
    return keys, flavor


def parse_settings(text):
    """key -> [values] of a settings file, as ParseSettingLines reads it (`#` comments,
    `key = value`), each key checked against the parser's."""
    keys, flavor = known_settings()
    out = {}
    for n, line in enumerate(text.split('\n'), 1):
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        assert '=' in line, 'line %d: expected `key = value`: %r' % (n, line)
        key, value = (s.strip() for s in line.split('=', 1))
        m = re.fullmatch(r'flavor\.([a-z0-9-]+)\.([a-z_]+)', key)
        if m:
            assert m.group(2) in flavor, 'line %d: unknown flavor setting %s (known: %s)' % (
                n, key, sorted(flavor))
        else:
            assert key in keys, 'line %d: unknown setting %s (known: %s)' % (n, key, sorted(keys))
        out.setdefault(key, []).append(value)
    return out


def settings_of(docs):
    return parse_settings(dispatcher_settings(docs)[1])


def dispatcher_settings(docs):
    """(--kube_settings path, the file's text) through the dispatcher's ConfigMap volume."""
    _, spec, c = dispatcher(docs)
    path = flag(c['args'], 'kube_settings')
    assert path, 'the dispatcher has no --kube_settings'
    mount = [m for m in c['volumeMounts'] if posixpath.dirname(path) == m['mountPath']]
    assert len(mount) == 1, '%s is not in a mounted directory' % path
    volume = [v for v in spec['volumes'] if v['name'] == mount[0]['name']][0]
    assert 'configMap' in volume, '%s is not a ConfigMap volume' % volume['name']
    file = posixpath.basename(path)
    items = volume['configMap'].get('items')
    key = [i['key'] for i in items if i['path'] == file][0] if items else file
    cm = one(docs, 'ConfigMap', volume['configMap']['name'])
    assert key in cm['data'], 'ConfigMap %s has no key %s' % (cm['metadata']['name'], key)
    return path, cm['data'][key]


@pytest.mark.parametrize('kustomization', KUSTOMIZATIONS)
def test_dispatcher_runs_the_kubernetes_backend_in_cluster(kustomization):
    docs = render(kustomization)
    obj, spec, c = dispatcher(docs)
    args = c['args']
    assert '--backend=kubernetes' in args
    # In the cluster: the pod's service account, not a kubeconfig.
    assert flag(args, 'kubeconfig') is None
    path, _ = dispatcher_settings(docs)
    assert path == '/etc/trainyard/kube/settings.conf'
    # --kube_cluster comes from the ConfigMap's `cluster` through the environment.
    assert flag(args, 'kube_cluster') == '$(TRAINYARD_CLUSTER)'
    env = {e['name']: e for e in c['env']}
    ref = env['TRAINYARD_CLUSTER']['valueFrom']['configMapKeyRef']
    assert one(docs, 'ConfigMap', ref['name'])['data'][ref['key']]
    # Job tokens: the api verifies what the dispatcher signs with the same key file.
    api = [ct for _, s in pod_templates(docs) for ct in s['containers'] if ct['args'][0] == 'api']
    assert flag(args, 'job_token_key_file') == flag(api[0]['args'], 'job_token_key_file')
    assert flag(args, 'api_advertise_addr') == 'trainyard-api.%s.svc:50051' % (
        obj['metadata']['namespace'])


@pytest.mark.parametrize('kustomization', KUSTOMIZATIONS)
def test_settings_file_is_consistent_with_the_manifests(kustomization):
    docs = render(kustomization)
    obj, spec, c = dispatcher(docs)
    s = settings_of(docs)
    for key, values in s.items():
        repeatable = key in ('pool_label', 'pool_flavor', 'image_pull_secret', 'gpu_model_map') \
            or key.endswith('.toleration') or key.endswith('.node_selector')
        assert repeatable or len(values) == 1, '%s given %d times' % (key, len(values))
    ns = s['namespace'][0]
    # The checkpoint volume: a ReadWriteMany claim in the job namespace, mounted by the
    # dispatcher, read-only, at the path the training pods mount their directories of it.
    kind, claim = s['checkpoint_volume'][0].split(':', 1)
    assert kind == 'pvc'
    pvc = one(docs, 'PersistentVolumeClaim', claim)
    assert pvc['metadata']['namespace'] == ns
    assert pvc['spec']['accessModes'] == ['ReadWriteMany']
    volumes = [v['name'] for v in spec['volumes']
               if v.get('persistentVolumeClaim', {}).get('claimName') == claim]
    assert len(volumes) == 1
    mount = [m for m in c['volumeMounts'] if m['name'] == volumes[0]]
    assert mount[0]['mountPath'] == s['checkpoint_mount_path'][0]
    assert mount[0]['readOnly'] is True
    # The Role is where the Jobs go.
    assert ns in [r['metadata']['namespace'] for r in objects(docs, 'Role')]


# ---------------------------------------------------------------- the overlays' ApplyBundles

def import_stubs():
    """The API's generated protobuf modules, through the Python client (trainyard.v1)."""
    client = os.path.join(REPO, 'clients', 'python')
    if client not in sys.path:
        sys.path.insert(0, client)
    from trainyard import _stubs
    _stubs.ensure_stubs()


def parse_bundle(path):
    import_stubs()
    from google.protobuf import text_format
    from trainyard.v1 import admin_pb2
    with open(path) as f:
        return text_format.Parse(f.read(), admin_pb2.ApplyBundle())


@pytest.mark.parametrize('overlay', OVERLAYS)
def test_overlay_bundle_defines_the_cluster_and_pools_the_settings_name(overlay):
    docs = render(overlay)
    bundle = parse_bundle(os.path.join(DEPLOY, overlay, 'cluster.textproto'))
    _, _, c = dispatcher(docs)
    ref = {e['name']: e for e in c['env']}['TRAINYARD_CLUSTER']['valueFrom']['configMapKeyRef']
    cluster_id = one(docs, 'ConfigMap', ref['name'])['data'][ref['key']]
    s = settings_of(docs)
    assert [cl.name for cl in bundle.clusters] == ['clusters/' + cluster_id]
    from trainyard.v1 import common_pb2 as cp
    assert bundle.clusters[0].backend == cp.BACKEND_KIND_KUBERNETES
    assert bundle.clusters[0].kubernetes.namespace == s['namespace'][0]
    # Pools named as the nodes' pool label values, each with the flavor of pool_flavor.
    pool_flavor = dict(v.rsplit(':', 1) for v in s['pool_flavor'])
    pools = {p.name.rsplit('/', 1)[1]: p for p in bundle.pools}
    assert {p.name for p in bundle.pools} == {
        'clusters/%s/pools/%s' % (cluster_id, p) for p in pool_flavor}
    label = s['pool_label'][0]
    for pool, p in pools.items():
        assert p.flavor == pool_flavor[pool]
        assert dict(p.node_selector) == {label: pool}
    # The flavors the settings place are the quick start's (deploy/local/demo.textproto).
    demo = parse_bundle(os.path.join(REPO, 'deploy', 'local', 'demo.textproto'))
    flavors = {f.name.split('/', 1)[1]: f for f in demo.flavors}
    placed = {k.split('.')[1] for k in s if k.startswith('flavor.')}
    assert placed == set(pool_flavor.values())
    assert placed <= set(flavors), sorted(placed - set(flavors))
    spot = [k.split('.')[1] for k in s if k.startswith('flavor.') and k.endswith('.spot')]
    assert [flavors[f].kind for f in spot] == [cp.FLAVOR_KIND_SPOT] * len(spot)


# ---------------------------------------------------------------- the dispatcher as deployed

def load_module(name, path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='module')
def live(tmp_path_factory):
    """PostgreSQL, Redis and `trainyard all` without a dispatcher (clients/python/tests/
    stack.py), an admin token, and the Kubernetes API test server (its kubeconfig stands in for
    the pod's service account). Skipped without the binary or the schemas."""
    stack = load_module('trainyard_deploy_stack',
                        os.path.join(REPO, 'clients', 'python', 'tests', 'stack.py'))
    try:
        stack.trainyard_bin()
    except RuntimeError as e:
        pytest.skip('the dispatcher as deployed: %s' % e)
    if not os.path.isdir(SCHEMAS):
        pytest.skip('the Kubernetes API test server needs the schemas at %s' % SCHEMAS)
    server = load_module('trainyard_deploy_kube_server',
                         os.path.join(REPO, 'tests', 'fixtures', 'kube_apiserver', 'conftest.py'))
    s = stack.Stack()
    kube_server = None
    try:
        s.start_postgres()
        s.start_redis()
        s.start_trainyard(None)
        s.tokens['admin'] = s.create_token('users/admin', 'platform-admin')
        s.apply(os.path.join(REPO, 'deploy', 'local', 'demo.textproto'))
        kube_server = server.KubeServer(str(tmp_path_factory.mktemp('kube')))
        yield s, kube_server, stack
    finally:
        if kube_server is not None:
            kube_server.stop()
        s.stop()


def run_dispatcher(docs, live, workdir, settings_text=None):
    """Starts the dispatcher container's command line as rendered, with its mounted files in
    `workdir` (the ConfigMap's from the rendering, the Secret's as an operator writes them) and
    --kubeconfig of the test server in place of the in-cluster service account. Returns the
    process, its HTTP port and its log file."""
    s, kube_server, stack = live
    _, spec, c = dispatcher(docs)
    volumes = {v['name']: v for v in spec['volumes']}
    paths = {}
    for m in c['volumeMounts']:
        v = volumes[m['name']]
        if 'configMap' not in v and 'secret' not in v:
            continue
        local = os.path.join(workdir, m['name'])
        os.makedirs(local, exist_ok=True)
        paths[m['mountPath']] = local
        if 'configMap' in v:
            data = one(docs, 'ConfigMap', v['configMap']['name'])['data']
            for item in v['configMap'].get('items') or [{'key': k, 'path': k} for k in data]:
                text = data[item['key']]
                if settings_text is not None and item['key'] == 'settings.conf':
                    text = settings_text
                with open(os.path.join(local, item['path']), 'w') as f:
                    f.write(text)
        elif 'secret' in v:
            # The Secret `trainyard` an operator creates (docs/kubernetes.md).
            files = {'database.conf': 'postgres_url = %s\nredis_addr = 127.0.0.1:%d\n' % (
                s.postgres_url, s.redis_port), 'job-token.key': '%s\n' % ('5a' * 32)}
            for item in v['secret']['items']:
                with open(os.path.join(local, item['path']), 'w') as f:
                    f.write(files[item['key']])
    env = {}
    for e in c.get('env') or []:
        ref = e['valueFrom']['configMapKeyRef']
        env[e['name']] = one(docs, 'ConfigMap', ref['name'])['data'][ref['key']]
    port = stack.free_port()
    args = []
    for a in c['args']:
        a = re.sub(r'\$\((\w+)\)', lambda m: env[m.group(1)], a)
        if a.startswith('--http_listen='):
            a = '--http_listen=127.0.0.1:%d' % port
        if a.startswith('--') and '=' in a:
            name, value = a.split('=', 1)
            mount = posixpath.dirname(value)
            if mount in paths:
                a = '%s=%s' % (name, os.path.join(paths[mount], posixpath.basename(value)))
        args.append(a)
    args.append('--kubeconfig=' + kube_server.kubeconfig)
    log = os.path.join(workdir, 'dispatcher.log')
    with open(log, 'w') as out:
        p = subprocess.Popen([s.bin] + args, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
    return p, port, log


def wait_for(what, fn, log, timeout=30):
    import time
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.1)
    with open(log) as f:
        raise AssertionError('timed out waiting for %s (last: %r)\n%s' % (what, last,
                                                                           f.read()[-3000:]))


def ready(port):
    import urllib.request
    try:
        with urllib.request.urlopen('http://127.0.0.1:%d/readyz' % port, timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def stop(p):
    if p.poll() is None:
        p.terminate()
        p.wait(20)


# The labels each overlay's cloud puts on its GPU nodes, written out from the clouds' own
# documentation: the node pool (GKE node pool, EKS managed node group), the GPU model (GKE's
# accelerator label; on EKS NVIDIA's GPU feature discovery) and Spot capacity.
CLOUD_NODE_LABELS = {
    'overlays/gke': {'pool': 'cloud.google.com/gke-nodepool',
                     'gpu': ('cloud.google.com/gke-accelerator', 'nvidia-h100-80gb'),
                     'spot': ('cloud.google.com/gke-spot', 'true')},
    'overlays/eks': {'pool': 'eks.amazonaws.com/nodegroup',
                     'gpu': ('nvidia.com/gpu.product', 'NVIDIA-H100-80GB-HBM3'),
                     'spot': ('eks.amazonaws.com/capacityType', 'SPOT')},
}


@pytest.mark.parametrize('overlay', OVERLAYS)
def test_dispatcher_as_deployed_reports_the_overlay_nodes_in_their_pools(overlay, live,
                                                                          tmp_path):
    """The overlay's cluster.textproto applied through the api; two 8-GPU H100 nodes per pool of
    it, labelled as the cloud labels them; the dispatcher started with the rendered command line
    and settings: the api lists the nodes in those pools, with the model H100."""
    s, kube_server, _ = live
    assert overlay in CLOUD_NODE_LABELS, 'write the labels of %s\'s cloud here' % overlay
    cloud = CLOUD_NODE_LABELS[overlay]
    docs = render(overlay)
    bundle_path = os.path.join(DEPLOY, overlay, 'cluster.textproto')
    bundle = parse_bundle(bundle_path)
    from trainyard.v1 import common_pb2
    s.apply(bundle_path)
    demo = parse_bundle(os.path.join(REPO, 'deploy', 'local', 'demo.textproto'))
    spot = {f.name.split('/', 1)[1] for f in demo.flavors
            if f.kind == common_pb2.FLAVOR_KIND_SPOT}
    cluster = bundle.clusters[0].name.split('/', 1)[1]
    expected = {}
    for p in bundle.pools:
        pool = p.name.rsplit('/', 1)[1]
        labels = {cloud['pool']: pool, cloud['gpu'][0]: cloud['gpu'][1]}
        if p.flavor in spot:
            labels[cloud['spot'][0]] = cloud['spot'][1]
        names = ['%s-%s-%d' % (cluster, pool, i) for i in range(2)]
        kube_server.admin('POST', '/nodes', {'names': names, 'gpus': 8, 'labels': labels})
        expected.update({'clusters/%s/nodes/%s' % (cluster, n): pool for n in names})
    assert len(expected) == 4, expected

    p, port, log = run_dispatcher(docs, live, str(tmp_path))
    try:
        wait_for('the dispatcher to be ready', lambda: p.poll() is None and ready(port), log)
        import grpc
        import_stubs()
        from trainyard.v1 import cluster_pb2, cluster_pb2_grpc
        with grpc.insecure_channel(s.target) as channel:
            stub = cluster_pb2_grpc.ClusterServiceStub(channel)

            def nodes():
                r = stub.ListNodes(cluster_pb2.ListNodesRequest(parent='clusters/' + cluster),
                                   metadata=[('authorization', 'Bearer ' + s.tokens['admin'])])
                return list(r.nodes) if len(r.nodes) == len(expected) else None
            listed = wait_for('the nodes in the api', nodes, log)
        assert {n.name: n.pool for n in listed} == expected
        for n in listed:
            assert (n.capacity.gpus, n.capacity.gpu_model) == (8, 'H100'), n
    finally:
        stop(p)
        for node in expected:
            kube_server.request('DELETE', '/api/v1/nodes/' + node.rsplit('/', 1)[1])


def test_dispatcher_as_deployed_starts_from_the_base(live, tmp_path):
    p, port, log = run_dispatcher(render('base'), live, str(tmp_path))
    try:
        wait_for('the dispatcher to be ready', lambda: p.poll() is None and ready(port), log)
    finally:
        stop(p)


def test_dispatcher_as_deployed_refuses_a_setting_it_does_not_know(live, tmp_path):
    """The check above is the binary's own parser: an unknown key stops the dispatcher."""
    docs = render('base')
    p, _, log = run_dispatcher(docs, live, str(tmp_path),
                               settings_text=dispatcher_settings(docs)[1] + 'colour = red\n')
    try:
        assert p.wait(60) != 0
    finally:
        stop(p)
    with open(log) as f:
        text = f.read()
    assert 'colour: unknown setting' in text, text[-2000:]
