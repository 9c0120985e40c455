{{/* Names and labels shared by every object of the chart. */}}

{{- define "sj.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sj.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* A store member Pod's labels: no chart or app version, which would make every chart
     version bump a new member template, and so a rolling restart of the whole store (the
     operator restarts members whose template changed). The members' image and configuration
     are what restart them. */}}
{{- define "sj.hazelcast.podLabels" -}}
{{ include "sj.hazelcast.selector" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The store's name: the snapshotjob.io/store label the operator gives the drivers and
     executors of the jobs that use this release's store (SJ_OPERATOR_STORE_LABEL), which the
     store's NetworkPolicy admits. <namespace>.<store>, or a hash of it past 63 characters
     (a label value's limit). */}}
{{- define "sj.store.label" -}}
{{- $name := printf "%s.%s" .Release.Namespace (include "sj.hazelcast.name" .) -}}
{{- if le (len $name) 63 -}}
{{- $name -}}
{{- else -}}
{{- printf "store-%s" (sha256sum $name | trunc 40) -}}
{{- end -}}
{{- end -}}

{{/* The drivers' ServiceAccount of jobs.rbac.precreate, in each watched namespace. */}}
{{- define "sj.jobs.serviceAccountName" -}}
{{- printf "%s-driver" (include "sj.fullname" .) -}}
{{- end -}}

{{- define "sj.operator.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "sj.hazelcast.name" -}}
{{- printf "%s-hazelcast" (include "sj.fullname" .) -}}
{{- end -}}

{{- define "sj.hazelcast.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: hazelcast
{{- end -}}

{{/* host:port of every member, through the headless Service's per-Pod DNS names. */}}
{{- define "sj.hazelcast.members" -}}
{{- $name := include "sj.hazelcast.name" . -}}
{{- $members := list -}}
{{- range $i := until (int .Values.hazelcast.replicas) -}}
{{- $members = append $members (printf "%s-%d.%s.%s.svc:%d" $name $i $name $.Release.Namespace (int $.Values.hazelcast.port)) -}}
{{- end -}}
{{- join "," $members -}}
{{- end -}}

{{/* The split-brain protection rule's name: snapshotjob_contract.SPLIT_BRAIN_PROTECTION. */}}
{{- define "sj.splitBrainProtection" -}}
sj-majority
{{- end -}}

{{/* The store's quorum: the value given, or a majority of the members. */}}
{{- define "sj.hazelcast.quorum" -}}
{{- .Values.hazelcast.splitBrainProtection.minimumClusterSize | default (add1 (div (int .Values.hazelcast.replicas) 2)) -}}
{{- end -}}

{{/* A snapshot map's merge policy and, if enabled, its split-brain protection. */}}
{{- define "sj.hazelcast.mapSafety" -}}
merge-policy:
  class-name: {{ .policy }}
{{- if .root.Values.hazelcast.splitBrainProtection.enabled }}
split-brain-protection-ref: {{ include "sj.splitBrainProtection" .root }}
{{- end }}
{{- end -}}

{{/* An image reference from an image value: [global.imageRegistry/]repository, then
     @digest if one is given, else :tag, the tag defaulting to appVersion. */}}
{{- define "sj.image" -}}
{{- $repository := .image.repository -}}
{{- with (.root.Values.global).imageRegistry -}}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) $repository -}}
{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (.image.tag | default .root.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The member attribute Hazelcast's NODE_AWARE partition group reads (PartitionGroupMetaData
     .PARTITION_GROUP_NODE), set as a system property from the Pod's node name. */}}
{{- define "sj.hazelcast.nodeAttribute" -}}
-Dhazelcast.member.attribute.hazelcast.partition.group.node=$(SJ_NODE_NAME)
{{- end -}}

{{/* "true" when the members are grouped by zone (ZONE_AWARE): the chart then renders their
     ServiceAccount, its read access to nodes and the init container that reads the zone. */}}
{{- define "sj.hazelcast.zoneAware" -}}
{{- with .Values.hazelcast -}}
{{- if and .enabled .partitionGroup.enabled (eq .partitionGroup.type "ZONE_AWARE") -}}
true
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The members' ServiceAccount under ZONE_AWARE (the operator's is the fullname). */}}
{{- define "sj.hazelcast.serviceAccountName" -}}
{{- include "sj.hazelcast.name" . -}}
{{- end -}}

{{/* Where the zone init container writes the member's JVM option (SJ_JAVA_OPTS_FILE), on an
     emptyDir the member container mounts. */}}
{{- define "sj.hazelcast.javaOptsFile" -}}
/var/run/snapshotjob/java-opts
{{- end -}}

{{/* The zone init container's program (python -c, in the operator's image: the member image
     has no Python). It is here rather than in an image so that it goes with the chart that
     uses it and needs nothing of the operator's package: the standard library's urllib reads
     the member's Node with the Pod's token and writes the zone attribute Hazelcast's
     ZONE_AWARE partition group reads (PartitionGroupMetaData.PARTITION_GROUP_ZONE); the
     kubelet cannot pass a node's label to a Pod. SJ_KUBE_API, SJ_KUBE_TOKEN_FILE and
     SJ_KUBE_CA_FILE default to the in-cluster API and credentials (a test sets them). */}}
{{- define "sj.hazelcast.zoneScript" -}}
import json, os, ssl, sys, urllib.error, urllib.parse, urllib.request
env = os.environ.get
secrets = "/var/run/secrets/kubernetes.io/serviceaccount"
host = env("KUBERNETES_SERVICE_HOST", "")
api = env("SJ_KUBE_API") or "https://%s:%s" % ("[%s]" % host if ":" in host else host, env("KUBERNETES_SERVICE_PORT"))
node = env("SJ_NODE_NAME")
with open(env("SJ_KUBE_TOKEN_FILE") or secrets + "/token") as f:
    token = f.read().strip()
request = urllib.request.Request(api + "/api/v1/nodes/" + urllib.parse.quote(node), headers={"Authorization": "Bearer " + token})
context = ssl.create_default_context(cafile=env("SJ_KUBE_CA_FILE") or secrets + "/ca.crt")
try:
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        labels = json.load(response)["metadata"].get("labels") or {}
except urllib.error.HTTPError as error:
    sys.exit("reading node %s: %s %s" % (node, error.code, error.read().decode(errors="replace")[:500]))
zone = labels.get("topology.kubernetes.io/zone")
if not zone:
    sys.exit("node %s has no topology.kubernetes.io/zone label: ZONE_AWARE needs every member's node labelled" % node)
with open(env("SJ_JAVA_OPTS_FILE"), "w") as f:
    f.write("-Dhazelcast.member.attribute.hazelcast.partition.group.zone=%s\n" % zone)
print("node %s is in zone %s" % (node, zone))
{{- end -}}

{{/* The headless Service of the operator Pods: `helm test` asks each one's /healthz. */}}
{{- define "sj.operator.service" -}}
{{- include "sj.fullname" . -}}
{{- end -}}

{{/* The operator's ServiceAccount: serviceAccount.name, or the fullname. Without
     serviceAccount.create the account must exist, so it must be named: falling back to the
     namespace's default account would hand it the operator's permissions. */}}
{{- define "sj.operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "sj.fullname" .) -}}
{{- else -}}
{{- required "serviceAccount.name must name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* A component's podLabels (.labels, the value's path .path), rendered after the chart's
     own labels. app.kubernetes.io/* keys are the chart's: one of them could change a Pod's
     selector labels, so they are refused. */}}
{{- define "sj.extraPodLabels" -}}
{{- range $key, $_ := .labels }}
{{- if hasPrefix "app.kubernetes.io/" $key }}
{{- fail (printf "%s: the label %s is reserved: app.kubernetes.io/* labels are the chart's own (its selectors)" $.path $key) }}
{{- end }}
{{- end }}
{{- toYaml .labels }}
{{- end -}}

{{/* The names of a list of image pull Secrets ([{name: ...}]), comma-separated. */}}
{{- define "sj.secretNames" -}}
{{- $names := list -}}
{{- range . }}{{ $names = append $names .name }}{{ end -}}
{{- join "," $names -}}
{{- end -}}
