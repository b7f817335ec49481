{{/* The namespace every namespaced object goes into. */}}
{{- define "ballast.namespace" -}}
{{- .Values.namespace.name -}}
{{- end -}}

{{/* The labels Helm adds to every object, beside those the kustomization sets. */}}
{{- define "ballast.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Labels of a component's objects: (dict "root" $ "component" "agent"); component may be empty. */}}
{{- define "ballast.labels" -}}
app.kubernetes.io/name: ballast
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{ include "ballast.helmLabels" .root }}
{{- end -}}

{{/* The selector (and pod template labels) of a component's workload. */}}
{{- define "ballast.selector" -}}
app.kubernetes.io/name: ballast
app.kubernetes.io/component: {{ . }}
{{- end -}}

{{- define "ballast.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* The Secret holding the seal key. */}}
{{- define "ballast.resultKeySecret" -}}
{{- .Values.resultKey.existingSecret | default "ballast-result-key" -}}
{{- end -}}

{{/* A ServiceAccount subject in the install's namespace: (dict "root" $ "name" "ballast-agent"). */}}
{{- define "ballast.subject" -}}
- kind: ServiceAccount
  name: {{ .name }}
  namespace: {{ include "ballast.namespace" .root }}
{{- end -}}

{{/* Preferred anti-affinity spreading a component's replicas over nodes, unless affinity is given:
     (dict "affinity" .Values.scheduler.affinity "component" "scheduler"). */}}
{{- define "ballast.affinity" -}}
{{- if .affinity }}
{{- toYaml .affinity }}
{{- else -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "ballast.selector" .component | nindent 12 }}
{{- end }}
{{- end -}}

{{/* nodeSelector, tolerations and priorityClassName of a pod spec, from a component's values. */}}
{{- define "ballast.placement" -}}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The pod securityContext of the non-root components. */}}
{{- define "ballast.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The container securityContext of the non-root components. */}}
{{- define "ballast.containerSecurityContext" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The probes of a component serving /healthz and /readyz on its metrics port. */}}
{{- define "ballast.httpProbes" -}}
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
  periodSeconds: 10
  timeoutSeconds: 5
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  periodSeconds: 20
  timeoutSeconds: 5
  failureThreshold: 3
{{- end -}}

{{/* The PodDisruptionBudget keeping one replica of a component: (dict "root" $ "component" "scheduler"). */}}
{{- define "ballast.pdb" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: ballast-{{ .component }}
  namespace: {{ include "ballast.namespace" .root }}
  labels:
    {{- include "ballast.labels" . | nindent 4 }}
spec:
  minAvailable: 1
  selector:
    matchLabels:
      {{- include "ballast.selector" .component | nindent 6 }}
{{- end -}}

{{/* The metrics Service of a component: (dict "root" $ "component" "rebalancer" "port" 8092). */}}
{{- define "ballast.metricsService" -}}
apiVersion: v1
kind: Service
metadata:
  name: ballast-{{ .component }}-metrics
  namespace: {{ include "ballast.namespace" .root }}
  labels:
    {{- include "ballast.labels" . | nindent 4 }}
spec:
  selector:
    {{- include "ballast.selector" .component | nindent 4 }}
  ports:
    - name: metrics
      port: {{ .port }}
      targetPort: metrics
      protocol: TCP
{{- end -}}

{{/* A component's lease Role and its RoleBinding: (dict "root" $ "component" "rebalancer"). */}}
{{- define "ballast.leaseRole" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: ballast-{{ .component }}-leader-election
  namespace: {{ include "ballast.namespace" .root }}
  labels:
    {{- include "ballast.labels" . | nindent 4 }}
rules:
  # create cannot be limited by name (the name is not known when it is authorized).
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["create"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    resourceNames: ["ballast-{{ .component }}"]
    verbs: ["get", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: ballast-{{ .component }}-leader-election
  namespace: {{ include "ballast.namespace" .root }}
  labels:
    {{- include "ballast.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: ballast-{{ .component }}-leader-election
subjects:
  {{- include "ballast.subject" (dict "root" .root "name" (printf "ballast-%s" .component)) | nindent 2 }}
{{- end -}}

{{/* A ServiceAccount: (dict "root" $ "component" "agent" "name" "ballast-agent"). */}}
{{- define "ballast.serviceAccount" -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .name }}
  namespace: {{ include "ballast.namespace" .root }}
  labels:
    {{- include "ballast.labels" . | nindent 4 }}
{{- end -}}

{{/* A ClusterRoleBinding of a ClusterRole to one of the chart's ServiceAccounts:
     (dict "root" $ "component" "agent" "name" "ballast-agent" "role" "ballast-agent" "sa" "ballast-agent"). */}}
{{- define "ballast.clusterRoleBinding" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ .name }}
  labels:
    {{- include "ballast.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ .role }}
subjects:
  {{- include "ballast.subject" (dict "root" .root "name" .sa) | nindent 2 }}
{{- end -}}

{{/* A NetworkPolicy letting only the Prometheus namespace reach a component's metrics port:
     (dict "root" $ "component" "agent" "port" 8091). */}}
{{- define "ballast.networkPolicy" -}}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: ballast-{{ .component }}-metrics
  namespace: {{ include "ballast.namespace" .root }}
  labels:
    {{- include "ballast.labels" . | nindent 4 }}
    app.kubernetes.io/part-of: ballast
spec:
  podSelector:
    matchLabels:
      {{- include "ballast.selector" .component | nindent 6 }}
  policyTypes: [Ingress]
  ingress:
    - from:
        - namespaceSelector:
            matchLabels:
              kubernetes.io/metadata.name: {{ .root.Values.networkPolicy.prometheusNamespace }}
      ports:
        - protocol: TCP
          port: {{ .port }}
{{- end -}}
