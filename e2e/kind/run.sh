#!/usr/bin/env bash
# End-to-end test of the content platform on a real Kubernetes cluster (kind).
#
#   create a kind cluster -> build + load both images -> CRDs (server-side apply) -> helm install
#   -> seed a claim with a file -> apply examples/minimal.yaml -> wait for Available
#   -> port-forward, fetch the file, read the pool metrics -> scale to 3 -> all 3 ready
#   -> uninstall.
#
# Idempotent: every step converges (an existing cluster, release, claim or resource is reused or
# replaced), so a failed run can simply be run again. Needs docker, kind, kubectl, helm, curl.
# See e2e/kind/README.md for the knobs (environment variables below).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CLUSTER=${CLUSTER:-contentserver-e2e}
NAMESPACE=${NAMESPACE:-contentserver-e2e}            # where the ContentServer lives
OPERATOR_NAMESPACE=${OPERATOR_NAMESPACE:-contentserver-system}
RELEASE=${RELEASE:-contentserver-operator}
TAG=${TAG:-e2e}
EXAMPLE=${EXAMPLE:-$ROOT/examples/minimal.yaml}
SEED_IMAGE=${SEED_IMAGE:-busybox:1.36}
TIMEOUT=${TIMEOUT:-300s}
KEEP_CLUSTER=${KEEP_CLUSTER:-0}   # 1: leave the cluster (and nothing else) behind at the end
SKIP_BUILD=${SKIP_BUILD:-0}       # 1: reuse content-server:$TAG / content-operator:$TAG as built
KUBECTL=(kubectl --context "kind-$CLUSTER")
HELM=(helm --kube-context "kind-$CLUSTER")

PF_PIDS=()
cleanup() {
  local pid
  for pid in ${PF_PIDS[@]+"${PF_PIDS[@]}"}; do kill "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

log() { printf '\n== %s\n' "$*"; }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

need() {
  local tool
  for tool in "$@"; do command -v "$tool" >/dev/null || die "$tool is not installed"; done
}

# free_port: a free local TCP port (asks the kernel for one).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# port_forward TARGET REMOTE_PORT: starts kubectl port-forward in the background, prints the
# local port once it answers.
port_forward() {
  local target=$1 remote=$2 local_port
  local_port=$(free_port)
  "${KUBECTL[@]}" -n "$NAMESPACE" port-forward "$target" "127.0.0.1:$local_port:$remote" \
    >/dev/null 2>&1 &
  PF_PIDS+=("$!")
  for _ in $(seq 1 50); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$local_port") 2>/dev/null; then
      echo "$local_port"
      return 0
    fi
    sleep 0.2
  done
  die "port-forward to $target:$remote did not come up"
}

need docker kind kubectl helm curl python3

# ---------------------------------------------------------------------------------------------
log "kind cluster $CLUSTER"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  echo "reusing existing cluster"
else
  kind create cluster --name "$CLUSTER" --wait 120s
fi
"${KUBECTL[@]}" cluster-info >/dev/null

# ---------------------------------------------------------------------------------------------
if [ "$SKIP_BUILD" != 1 ]; then
  log "build images (tag $TAG)"
  docker build --target content-server -t "content-server:$TAG" "$ROOT"
  docker build --target content-operator -t "content-operator:$TAG" "$ROOT"
fi
log "load images into kind"
kind load docker-image --name "$CLUSTER" "content-server:$TAG" "content-operator:$TAG"

# ---------------------------------------------------------------------------------------------
# CRDs first and server-side: Helm installs the chart's crds/ only once and never upgrades them,
# so this is also how an existing cluster gets a newer CRD.
log "CRDs (kubectl apply --server-side)"
"${KUBECTL[@]}" apply --server-side --force-conflicts -f "$ROOT/crds/"
"${KUBECTL[@]}" wait --for=condition=Established --timeout=60s \
  crd/contentservers.contentserver.dev

log "helm upgrade --install $RELEASE"
"${HELM[@]}" upgrade --install "$RELEASE" "$ROOT/charts/contentserver-operator" \
  --namespace "$OPERATOR_NAMESPACE" --create-namespace \
  --set image.repository=content-operator --set image.tag="$TAG" \
  --set image.pullPolicy=Never \
  --wait --timeout "$TIMEOUT"
# The chart's full name: the release name when it contains the chart name, else both.
case "$RELEASE" in
  *contentserver-operator*) OPERATOR_DEPLOYMENT=$RELEASE ;;
  *) OPERATOR_DEPLOYMENT=$RELEASE-contentserver-operator ;;
esac
"${KUBECTL[@]}" -n "$OPERATOR_NAMESPACE" rollout status "deployment/$OPERATOR_DEPLOYMENT" \
  --timeout="$TIMEOUT"

# ---------------------------------------------------------------------------------------------
"${KUBECTL[@]}" create namespace "$NAMESPACE" --dry-run=client -o yaml | "${KUBECTL[@]}" apply -f -

# What to seed, read from the example (not hard-coded): the ContentServer's name, and the claim
# behind its first volume. An existing claim (`persistentVolumeClaim`) is seeded as it is; a
# per-pod claim (`claimTemplate`) is created ahead under the name the StatefulSet adopts for
# pod 0: <pod volume "vol-NAME">-<StatefulSet = ContentServer name>-0.
read -r CS_NAME CLAIM CLAIM_KIND STORAGE_CLASS < <(
  "${KUBECTL[@]}" create --dry-run=client -f "$EXAMPLE" -o json | python3 -c '
import json, sys
doc = json.load(sys.stdin)
for it in doc.get("items", [doc]):
    if it.get("kind") != "ContentServer":
        continue
    name = it["metadata"]["name"]
    for v in it["spec"]["volumes"]:
        src = v.get("source", {})
        if "persistentVolumeClaim" in src:
            print(name, src["persistentVolumeClaim"]["claimName"], "existing", "-")
            sys.exit(0)
        if "claimTemplate" in src:
            sc = src["claimTemplate"].get("storageClassName") or "-"
            print(name, "vol-%s-%s-0" % (v["name"], name), "template", sc)
            sys.exit(0)
    sys.exit("the first ContentServer in the example has no claim-backed volume")
sys.exit("no ContentServer in the example")
'
) || true
if [ -z "${CS_NAME:-}" ] || [ -z "${CLAIM:-}" ]; then die "could not read the ContentServer and its claim from $EXAMPLE"; fi
echo "ContentServer $CS_NAME, claim $CLAIM ($CLAIM_KIND)"

log "seed claim $CLAIM with hello.txt"
CONTENT="hello from the content platform e2e $(date -u +%s)"
# The seeding Job and a server pod cannot share a ReadWriteOnce claim: stop the server first
# when a previous run left it running.
if "${KUBECTL[@]}" -n "$NAMESPACE" get contentserver "$CS_NAME" >/dev/null 2>&1; then
  "${KUBECTL[@]}" -n "$NAMESPACE" scale contentserver "$CS_NAME" --replicas=0
  "${KUBECTL[@]}" -n "$NAMESPACE" wait --for=delete pod -l "app.kubernetes.io/instance=$CS_NAME" \
    --timeout="$TIMEOUT" 2>/dev/null || true
fi
if [ "$CLAIM_KIND" = existing ]; then
  # The claim may be part of the example: apply only its PersistentVolumeClaims now.
  "${KUBECTL[@]}" create --dry-run=client -f "$EXAMPLE" -o json | python3 -c '
import json, sys
doc = json.load(sys.stdin)
pvcs = [it for it in doc.get("items", [doc]) if it.get("kind") == "PersistentVolumeClaim"]
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": pvcs}))
' | "${KUBECTL[@]}" -n "$NAMESPACE" apply -f -
fi
if ! "${KUBECTL[@]}" -n "$NAMESPACE" get pvc "$CLAIM" >/dev/null 2>&1; then
  SC_LINE=""
  [ "$STORAGE_CLASS" = - ] || SC_LINE="storageClassName: $STORAGE_CLASS"
  "${KUBECTL[@]}" -n "$NAMESPACE" apply -f - <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: $CLAIM
  labels:
    app.kubernetes.io/name: content-server
    app.kubernetes.io/instance: $CS_NAME
spec:
  $SC_LINE
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
EOF
fi
"${KUBECTL[@]}" -n "$NAMESPACE" delete job e2e-seed --ignore-not-found --wait=true
"${KUBECTL[@]}" -n "$NAMESPACE" apply -f - <<EOF
apiVersion: batch/v1
kind: Job
metadata:
  name: e2e-seed
spec:
  backoffLimit: 2
  template:
    spec:
      restartPolicy: Never
      securityContext:
        runAsUser: 65532
        runAsGroup: 65532
        fsGroup: 65532
      containers:
        - name: seed
          image: $SEED_IMAGE
          command: ["sh", "-c", "printf '%s' \"\$CONTENT\" > /data/hello.txt && ls -l /data"]
          env:
            - name: CONTENT
              value: "$CONTENT"
          volumeMounts:
            - name: data
              mountPath: /data
      volumes:
        - name: data
          persistentVolumeClaim:
            claimName: $CLAIM
EOF
"${KUBECTL[@]}" -n "$NAMESPACE" wait --for=condition=Complete --timeout="$TIMEOUT" job/e2e-seed
"${KUBECTL[@]}" -n "$NAMESPACE" delete job e2e-seed --wait=true

# ---------------------------------------------------------------------------------------------
log "apply $EXAMPLE (image content-server:$TAG)"
# The example as written, except: the locally built image, and one replica to start with.
"${KUBECTL[@]}" create --dry-run=client -f "$EXAMPLE" -o json | TAG="$TAG" python3 -c '
import json, os, sys
doc = json.load(sys.stdin)
for it in doc.get("items", [doc]):
    if it.get("kind") == "ContentServer":
        it["spec"].update(image="content-server:" + os.environ["TAG"],
                          imagePullPolicy="Never", replicas=1)
print(json.dumps(doc))
' | "${KUBECTL[@]}" -n "$NAMESPACE" apply --server-side --force-conflicts -f -

log "wait for Available"
"${KUBECTL[@]}" -n "$NAMESPACE" wait --for=condition=Available --timeout="$TIMEOUT" \
  "contentserver/$CS_NAME"
"${KUBECTL[@]}" -n "$NAMESPACE" get contentserver "$CS_NAME" -o wide

# ---------------------------------------------------------------------------------------------
log "fetch hello.txt through the Service"
HTTP_PORT=$("${KUBECTL[@]}" -n "$NAMESPACE" get service "$CS_NAME" \
  -o jsonpath='{.spec.ports[?(@.name=="http")].port}')
[ -n "$HTTP_PORT" ] || die "service $CS_NAME has no port named http"
LOCAL=$(port_forward "service/$CS_NAME" "$HTTP_PORT")
GOT=$(curl -fsS --max-time 10 "http://127.0.0.1:$LOCAL/hello.txt")
[ "$GOT" = "$CONTENT" ] || die "hello.txt: got '$GOT', want '$CONTENT'"
echo "ok: GET /hello.txt returned the seeded content"

log "read pool metrics from a pod's admin port"
POD=$("${KUBECTL[@]}" -n "$NAMESPACE" get pods -l "app.kubernetes.io/instance=$CS_NAME" \
  -o jsonpath='{.items[0].metadata.name}')
[ -n "$POD" ] || die "no pod of $CS_NAME"
ADMIN_PORT=$("${KUBECTL[@]}" -n "$NAMESPACE" get pod "$POD" \
  -o jsonpath='{.spec.containers[0].ports[?(@.name=="metrics")].containerPort}')
ADMIN_PORT=${ADMIN_PORT:-9190}
LOCAL_ADMIN=$(port_forward "pod/$POD" "$ADMIN_PORT")
METRICS=$(curl -fsS --max-time 10 "http://127.0.0.1:$LOCAL_ADMIN/metrics")
for series in contentserver_pool_threads contentserver_pool_queue_capacity \
  contentserver_pool_tasks_total contentserver_http_requests_total; do
  grep -q "^$series" <<<"$METRICS" || die "/metrics of $POD has no $series"
done
grep -E '^contentserver_pool_threads\{' <<<"$METRICS"
TASKS=$(awk '/^contentserver_pool_tasks_total\{/ {s += $NF} END {print s + 0}' <<<"$METRICS")
REQS=$(awk '/^contentserver_http_requests_total\{.*code="200"/ {s += $NF} END {print s + 0}' <<<"$METRICS")
echo "pool tasks: $TASKS, 200 responses: $REQS"
[ "${REQS%.*}" -ge 1 ] || die "no 200 response counted after fetching hello.txt"

# ---------------------------------------------------------------------------------------------
log "scale to 3 (scale subresource) and check readiness"
"${KUBECTL[@]}" -n "$NAMESPACE" scale contentserver "$CS_NAME" --replicas=3
"${KUBECTL[@]}" -n "$NAMESPACE" wait --for=jsonpath='{.status.readyReplicas}'=3 \
  --timeout="$TIMEOUT" "contentserver/$CS_NAME"
"${KUBECTL[@]}" -n "$NAMESPACE" wait --for=condition=Ready --timeout="$TIMEOUT" pod \
  -l "app.kubernetes.io/instance=$CS_NAME"
READY=$("${KUBECTL[@]}" -n "$NAMESPACE" get pods -l "app.kubernetes.io/instance=$CS_NAME" \
  -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' \
  | grep -c True || true)
[ "$READY" -eq 3 ] || die "$READY of 3 pods ready"
"${KUBECTL[@]}" -n "$NAMESPACE" wait --for=condition=Available --timeout="$TIMEOUT" \
  "contentserver/$CS_NAME"
echo "ok: 3 of 3 pods ready, ContentServer Available"

# ---------------------------------------------------------------------------------------------
log "uninstall"
cleanup
PF_PIDS=()
"${KUBECTL[@]}" -n "$NAMESPACE" delete -f "$EXAMPLE" --ignore-not-found --wait=true
"${KUBECTL[@]}" -n "$NAMESPACE" wait --for=delete pod -l "app.kubernetes.io/instance=$CS_NAME" \
  --timeout="$TIMEOUT" 2>/dev/null || true
"${HELM[@]}" uninstall "$RELEASE" --namespace "$OPERATOR_NAMESPACE" --wait
# Helm leaves CRDs behind on purpose (deleting one deletes every ContentServer); this is a
# throw-away cluster, so remove them too.
"${KUBECTL[@]}" delete -f "$ROOT/crds/" --ignore-not-found
"${KUBECTL[@]}" delete namespace "$NAMESPACE" --ignore-not-found
if [ "$KEEP_CLUSTER" != 1 ]; then
  kind delete cluster --name "$CLUSTER"
fi
log "e2e on kind passed"
