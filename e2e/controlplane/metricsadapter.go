package main

// The local cluster's custom metrics adapter: custom.metrics.k8s.io for Pods metrics
// (an HPA's `type: Pods` target), each value read from Prometheus. It is built on
// sigs.k8s.io/custom-metrics-apiserver, the library prometheus-adapter is built on
// (prometheus-adapter itself is not served by the Go module proxy here). Only the metric
// names given with --pod-metric are exposed; a pod's value is
//   sum by (pod) (<metric>{namespace="<ns>", pod="<pod>"})
// of the series Prometheus scraped from it (localkube's scrape config labels every pod's
// series with namespace and pod).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/dynamic"
	"k8s.io/component-base/logs"
	"k8s.io/klog/v2"
	"k8s.io/metrics/pkg/apis/custom_metrics"

	basecmd "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider/helpers"
)

var metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)

type prometheusProvider struct {
	prometheus string
	metrics    map[string]bool
	mapper     apimeta.RESTMapper
	client     dynamic.Interface
	http       *http.Client
}

func (p *prometheusProvider) ListAllMetrics() []provider.CustomMetricInfo {
	out := make([]provider.CustomMetricInfo, 0, len(p.metrics))
	for m := range p.metrics {
		out = append(out, provider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "pods"}, Namespaced: true, Metric: m})
	}
	return out
}

// values asks Prometheus for the metric of each pod; pods without a series are left out.
func (p *prometheusProvider) values(ctx context.Context, metric, namespace string, pods []string) (map[string]float64, time.Time, error) {
	quoted := make([]string, len(pods))
	for i, pod := range pods {
		quoted[i] = regexp.QuoteMeta(pod)
	}
	query := fmt.Sprintf(`sum by (pod) (%s{namespace=%q,pod=~%q})`, metric, namespace, "^(?:"+strings.Join(quoted, "|")+")$")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.prometheus+"/api/v1/query?query="+url.QueryEscape(query), nil)
	if err != nil {
		return nil, time.Time{}, err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("prometheus: %w", err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]interface{}    `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, time.Time{}, fmt.Errorf("prometheus answered %s: %w", resp.Status, err)
	}
	if body.Status != "success" {
		return nil, time.Time{}, fmt.Errorf("prometheus: %s", body.Error)
	}
	out := map[string]float64{}
	at := time.Now()
	for _, r := range body.Data.Result {
		text, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			continue
		}
		if ts, ok := r.Value[0].(float64); ok {
			at = time.Unix(0, int64(ts*1e9))
		}
		out[r.Metric["pod"]] = v
	}
	return out, at, nil
}

func (p *prometheusProvider) metricValue(name types.NamespacedName, info provider.CustomMetricInfo, v float64, at time.Time) (custom_metrics.MetricValue, error) {
	ref, err := helpers.ReferenceFor(p.mapper, name, info)
	if err != nil {
		return custom_metrics.MetricValue{}, err
	}
	return custom_metrics.MetricValue{
		DescribedObject: ref,
		Metric:          custom_metrics.MetricIdentifier{Name: info.Metric},
		Timestamp:       metav1.NewTime(at),
		Value:           *resource.NewMilliQuantity(int64(v*1000), resource.DecimalSI),
	}, nil
}

func (p *prometheusProvider) check(info provider.CustomMetricInfo, name string) error {
	if info.GroupResource.Resource != "pods" || !p.metrics[info.Metric] {
		return provider.NewMetricNotFoundForError(info.GroupResource, info.Metric, name)
	}
	return nil
}

func (p *prometheusProvider) GetMetricByName(ctx context.Context, name types.NamespacedName, info provider.CustomMetricInfo, _ labels.Selector) (*custom_metrics.MetricValue, error) {
	if err := p.check(info, name.Name); err != nil {
		return nil, err
	}
	values, at, err := p.values(ctx, info.Metric, name.Namespace, []string{name.Name})
	if err != nil {
		return nil, err
	}
	v, ok := values[name.Name]
	if !ok {
		return nil, provider.NewMetricNotFoundForError(info.GroupResource, info.Metric, name.Name)
	}
	value, err := p.metricValue(name, info, v, at)
	return &value, err
}

func (p *prometheusProvider) GetMetricBySelector(ctx context.Context, namespace string, selector labels.Selector, info provider.CustomMetricInfo, _ labels.Selector) (*custom_metrics.MetricValueList, error) {
	if err := p.check(info, selector.String()); err != nil {
		return nil, err
	}
	names, err := helpers.ListObjectNames(p.mapper, p.client, namespace, selector, info)
	if err != nil {
		return nil, err
	}
	list := &custom_metrics.MetricValueList{Items: []custom_metrics.MetricValue{}}
	if len(names) == 0 {
		return list, nil
	}
	values, at, err := p.values(ctx, info.Metric, namespace, names)
	if err != nil {
		return nil, err
	}
	for _, pod := range names {
		v, ok := values[pod]
		if !ok {
			continue
		}
		value, err := p.metricValue(types.NamespacedName{Namespace: namespace, Name: pod}, info, v, at)
		if err != nil {
			return nil, err
		}
		list.Items = append(list.Items, value)
	}
	return list, nil
}

func runMetricsAdapter() int {
	cmd := &basecmd.AdapterBase{Name: "localkube-metrics-adapter"}
	var prometheus string
	var metrics []string
	cmd.Flags().StringVar(&prometheus, "prometheus-url", "", "Prometheus to read metrics from, e.g. http://127.0.0.1:9090")
	cmd.Flags().StringSliceVar(&metrics, "pod-metric", nil, "a Prometheus metric served as a Pods metric (repeatable)")
	logs.AddFlags(cmd.Flags())
	if err := cmd.Flags().Parse(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if prometheus == "" || len(metrics) == 0 {
		fmt.Fprintln(os.Stderr, "metrics-adapter: --prometheus-url and at least one --pod-metric are required")
		return 2
	}
	allowed := map[string]bool{}
	for _, m := range metrics {
		if !metricName.MatchString(m) {
			fmt.Fprintf(os.Stderr, "metrics-adapter: %q is not a Prometheus metric name\n", m)
			return 2
		}
		allowed[m] = true
	}
	client, err := cmd.DynamicClient()
	if err != nil {
		klog.Errorf("dynamic client: %v", err)
		return 1
	}
	mapper, err := cmd.RESTMapper()
	if err != nil {
		klog.Errorf("REST mapper: %v", err)
		return 1
	}
	cmd.WithCustomMetrics(&prometheusProvider{
		prometheus: strings.TrimRight(prometheus, "/"),
		metrics:    allowed,
		mapper:     mapper,
		client:     client,
		http:       &http.Client{Timeout: 10 * time.Second},
	})
	if err := cmd.Run(genericapiserver.SetupSignalContext()); err != nil {
		klog.Errorf("metrics adapter: %v", err)
		return 1
	}
	return 0
}
