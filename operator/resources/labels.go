package resources

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// HasLabels reports whether o has every label of want, with its value.
func HasLabels(o metav1.Object, want map[string]string) bool {
	for k, v := range want {
		if got, ok := o.GetLabels()[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// SetLabel sets o's label k to v.
func SetLabel(o metav1.Object, k, v string) {
	l := o.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[k] = v
	o.SetLabels(l)
}
