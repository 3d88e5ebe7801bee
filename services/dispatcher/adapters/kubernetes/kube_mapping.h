// The pure half of the Kubernetes adapter (docs/kubernetes.md, "Mapping"):
// an attempt as a batch/v1 Job and a headless Service, the Job and its pods
// read back as an AttemptStatus, a Node and the pods bound to it as a
// NodeInventory, and Kubernetes resource quantities. No I/O, deterministic
// (the time is a parameter); unit-tested in kube_mapping_test.cc.
#ifndef TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_MAPPING_H_
#define TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_MAPPING_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/dispatcher/adapters/adapter.h"
#include "services/dispatcher/adapters/kubernetes/kube_settings.h"

namespace trainyard::dispatcher::kubernetes {

// --- Names Trainyard puts on its objects -------------------------------------

// Labels of the Job, its pods and the Service.
inline constexpr std::string_view kLabelTenant = "trainyard.dev/tenant";
inline constexpr std::string_view kLabelJob = "trainyard.dev/job";
inline constexpr std::string_view kLabelAttempt = "trainyard.dev/attempt";
// The attempt's backend name "ty-<job>-<attempt>" (= the Job's name); the
// Service selects the pods by it.
inline constexpr std::string_view kLabelName = "trainyard.dev/name";
inline constexpr std::string_view kLabelProject = "trainyard.dev/project";
inline constexpr std::string_view kLabelFlavor = "trainyard.dev/flavor";
// Selects every object Trainyard owns: "trainyard.dev/name" exists.
inline constexpr std::string_view kOwnedSelector = "trainyard.dev/name";

// Annotations of the Job (and its pods).
// "tenants/<tenant>/jobs/<job>".
inline constexpr std::string_view kAnnotationJobName = "trainyard.dev/job-name";
// The scheduler's node of each worker, by index, comma-separated.
inline constexpr std::string_view kAnnotationWorkerNodes =
    "trainyard.dev/worker-nodes";
// spec.checkpoint.directory, where the adapter reads the manifest.
inline constexpr std::string_view kAnnotationCheckpointDir =
    "trainyard.dev/checkpoint-dir";
// "true" when the attempt runs on a spot flavor.
inline constexpr std::string_view kAnnotationSpot = "trainyard.dev/spot";
// Set on the Job by the adapter's Stop: "cancel" or "preemption", and when
// the stop takes effect (RFC 3339, UTC).
inline constexpr std::string_view kAnnotationStopReason =
    "trainyard.dev/stop-reason";
inline constexpr std::string_view kAnnotationStopDeadline =
    "trainyard.dev/stop-deadline";

// The Job controller's annotation (and label) of each pod's index.
inline constexpr std::string_view kCompletionIndexAnnotation =
    "batch.kubernetes.io/job-completion-index";
// The one container of every worker pod.
inline constexpr std::string_view kWorkerContainer = "worker";
// The checkpoint volume's name in the pod.
inline constexpr std::string_view kCheckpointVolume = "checkpoint";

// StopReason as the stop-reason annotation writes it, and back (nullopt for
// anything else).
std::string_view StopReasonValue(StopReason reason);
std::optional<StopReason> ParseStopReasonValue(std::string_view value);

// --- Quantities --------------------------------------------------------------

// A Kubernetes resource quantity ("500m", "1.5Gi", "129e6", "1Ki", "2E")
// as an exact integer: the value times 10^scale, rounded up (away from zero),
// as resource.Quantity's Value (scale 0) and MilliValue (scale 3) do.
// Grammar (k8s.io/apimachinery/pkg/api/resource): a signed decimal number
// ("5", "5.", ".5", "5.25") then a suffix: binary Ki Mi Gi Ti Pi Ei, decimal
// n u m "" k M G T P E, or an exponent e<int> / E<int>. INVALID_ARGUMENT for
// anything else, for more than 19 significant digits and for values that do
// not fit in int64 after scaling.
absl::StatusOr<int64_t> ParseQuantity(std::string_view text, int scale = 0);
// A quantity field of a JSON object: a string, or a JSON integer.
absl::StatusOr<int64_t> QuantityOf(const nlohmann::json& value, int scale = 0);

// Canonical strings: millicores "500m", or "2" for whole cores; bytes "16Gi"
// or "512Mi" when exact, else the plain number of bytes.
std::string CpuQuantity(int64_t millis);
std::string MemoryQuantity(int64_t bytes);

// --- Launching ---------------------------------------------------------------

// The attempt as a batch/v1 Job named request.name in settings.namespace_
// (docs/kubernetes.md shows one): Indexed, completions = parallelism =
// workers, backoffLimit 0, activeDeadlineSeconds = spec.time_limit (rounded
// up to a second) when set; labels tenant, job, attempt, name, project,
// flavor; annotations job-name, worker-nodes (left out beyond 64 KiB),
// checkpoint-dir, spot. The pod template: the same labels, the job-name
// annotation, restartPolicy Never, subdomain = the Service's name,
// terminationGracePeriodSeconds = spec.checkpoint.grace_period (else the
// settings' default), the flavor's node selector and tolerations (and one for
// the GPU resource's taint when it asks for GPUs; for not-ready and
// unreachable nodes with settings.node_lost_after), required node affinity
// `metadata.name In` the placed nodes, pod anti-affinity on the name label
// per hostname when every worker has a node of its own (a topology spread of
// maxSkew 1 when each node holds the same number of workers), one container
// "worker": image, command, workingDir, env = AttemptEnv(request) +
// TRAINYARD_WORKER_INDEX and RANK (the completion index, from the downward
// API), WORLD_SIZE, MASTER_ADDR "<name>-0.<name>", MASTER_PORT; requests =
// limits of the GPU resource, cpu and memory (those that are non-zero); the
// job's checkpoint directory mounted from the shared checkpoint volume.
//
// Fields Kubernetes cannot honour are refused, INVALID_ARGUMENT naming them:
// no image (and no default_image), a relative working_dir, a local checkpoint
// directory outside the mounted checkpoint volume (or without one), a local
// resume_from outside the mounted directory, negative durations, a project
// that is not a label value, text that is not UTF-8.
// ValidateLaunchRequest's checks come first. A
// flavor the settings do not know is FAILED_PRECONDITION naming `flavor` when
// any flavor is configured.
absl::StatusOr<nlohmann::json> BuildJob(const LaunchRequest& request,
                                        const KubernetesSettings& settings);

// Whether an attempt needs its headless Service: workers that find each other
// by DNS name (more than one). A single worker rendezvouses with itself
// (MASTER_ADDR 127.0.0.1) and its Job is the one object created.
bool NeedsService(const LaunchRequest& request);

// The headless Service (clusterIP None, selector trainyard.dev/name,
// publishNotReadyAddresses, the rendezvous port) that gives the workers DNS
// names. With `owner_job_uid`, it is owned by the Job (ownerReferences), so
// deleting the Job deletes it.
absl::StatusOr<nlohmann::json> BuildService(
    const LaunchRequest& request, const KubernetesSettings& settings,
    std::string_view owner_job_uid = "");

// --- Attempt state -----------------------------------------------------------

// Images that fail to pull are retried by the kubelet (ImagePullBackOff);
// an attempt whose worker has been failing to pull this long is failed
// (KubernetesSettings::image_pull_patience's default).
inline constexpr absl::Duration kImagePullPatience = absl::Minutes(5);

// The attempt a Job and its pods stand for (checkpoints are the adapter's:
// this leaves them empty). `pods`: the Job's pods (any order; several of one
// index are told apart by creation time). `nodes`: the cluster's nodes as
// the adapter last saw them, sorted by name (as Adapter::Inventory returns
// them), or nullptr; when given, a worker still running on a node that is
// failed or gone counts as lost to a node failure, and a node with a spot
// label makes the attempt a spot one.
//
// Phase: Succeeded when the Job is Complete (or SuccessCriteriaMet, which
// Kubernetes 1.31 sets before it); Failed when it is Failed (or
// FailureTarget, likewise), or
// when a worker can never start (InvalidImageName or
// CreateContainerConfigError at once; ErrImagePull, ImagePullBackOff,
// CreateContainerError after image_pull_patience from its scheduling);
// Cancelled when a stop was requested (stop-reason annotation) and the Job
// failed, or no pod is left and the Job is suspended or the stop deadline
// has passed; Running once every worker's container has started; else
// Pending. The failure class of a failed Job, the first that applies:
//   1. a stop was requested: kCancelled, or kPreempted for a preemption;
//   2. Job condition Failed with reason DeadlineExceeded: kTimeLimit;
//   3. the platform's hand in any pod (it outranks the workers' exits: a
//      worker whose peer's node died exits non-zero too), by rank:
//      node shutdown (DisruptionTarget TerminationByKubelet, pod reason
//      Terminated) on a spot attempt: kSpotReclaim; the same off spot,
//      DisruptionTarget DeletionByTaintManager or DeletionByPodGC, pod
//      reason NodeLost, a not yet ended worker whose node is failed or
//      gone (with `nodes`): kNodeFailure (kSpotReclaim on spot); then pod
//      reason Evicted (node pressure): kNodeFailure; DisruptionTarget
//      EvictionByEvictionAPI (a drain): kNodeFailure (kSpotReclaim on
//      spot); then DisruptionTarget PreemptionByScheduler: kPreempted; then
//      a kubelet admission refusal (OutOf<resource>,
//      UnexpectedAdmissionError, NodeAffinity): kBackendError;
//   4. the first worker to end by itself: OOMKilled → kUserError, exit 137;
//      a non-zero exit → kUserError with its code; a container waiting on
//      an image or container error → kUserError with the kubelet's message;
//   5. a worker without a pod: kNodeFailure (kSpotReclaim on spot);
//   6. anything else: kBackendError with the Job condition's reason.
// A spot attempt: the Job's trainyard.dev/spot annotation, a worker's
// node selector or (with `nodes`) node carrying a preset's spot label.
// Messages name the worker and Kubernetes' reason: "worker 2 OOMKilled (exit
// 137)". Times: submit = the Job's creationTimestamp, start = when the last
// worker's container started (every worker started), end = the Job's
// terminal condition (else the last worker's end, else `now`).
AttemptStatus AttemptFromObjects(
    const nlohmann::json& job, const std::vector<nlohmann::json>& pods,
    absl::Time now, const std::vector<NodeInventory>* nodes = nullptr,
    absl::Duration image_pull_patience = kImagePullPatience);

// --- Nodes -------------------------------------------------------------------

// A Node and the pods bound to it (spec.nodeName; others are skipped) as
// inventory: capacity = status.allocatable (the GPU resource, cpu, memory);
// used = the effective requests of its non-terminal pods (anyone's: the
// larger of the containers' sum and each init container, sidecars counted,
// plus overhead; limits stand for missing requests); gpu_model (settings'
// gpu_model, else the model label mapped by gpu_models); zone/block/rack,
// pool (the first pool label present) and flavor (flavor label, else the
// pool's flavor); every label. failed: Ready False or Unknown, or being
// deleted. schedulable: not failed, not cordoned (spec.unschedulable) and
// no NoSchedule/NoExecute taint that the node's flavor (or, for a node of
// no known flavor, any flavor) does not tolerate; the GPU resource's own
// taint is tolerated. state_message says why ("cordoned", "NotReady:
// KubeletNotReady ...", "tainted k=v:NoSchedule", "being deleted").
NodeInventory NodeFromObject(const nlohmann::json& node,
                             const std::vector<const nlohmann::json*>& pods,
                             const KubernetesSettings& settings);

// One pod's effective requests (as kube-scheduler counts them).
struct PodRequests {
  int64_t gpus = 0;
  int64_t cpu_millis = 0;
  int64_t memory_bytes = 0;
  friend bool operator==(const PodRequests&, const PodRequests&) = default;
};
PodRequests PodEffectiveRequests(const nlohmann::json& pod,
                                 std::string_view gpu_resource);

// Shrinks a pod that is not Trainyard's (no trainyard.dev/name label) to what
// the adapter reads of it, so that watching a large cluster's pods costs
// little memory: metadata name, namespace, uid, resourceVersion, creation and
// deletion timestamps; spec nodeName, overhead, and each container's and init
// container's name, resources and restartPolicy; status phase.
// PodEffectiveRequests gives the same answer before and after. Trainyard's
// own pods are left whole.
void CompactForeignPod(nlohmann::json& pod);

}  // namespace trainyard::dispatcher::kubernetes

#endif  // TRAINYARD_SERVICES_DISPATCHER_ADAPTERS_KUBERNETES_KUBE_MAPPING_H_
