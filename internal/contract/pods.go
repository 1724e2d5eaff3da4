package contract

import (
	"strconv"
	"strings"
)

// PodOrdinal is the ordinal of the pod named pod when it is one of the
// StatefulSet set's (<set>-<ordinal>, the ordinal in decimal with neither
// sign nor leading zero), and false when it is not.
//
// A pod's labels are no proof of whose server it is: an instance manager
// may patch its own pod, so a compromised one can take the labels of
// another MyDatabase of its namespace. Its name it cannot change, and no
// two MyDatabases' pods can share one (<set>-<ordinal> read back is one
// set and one ordinal). The operator and the instance managers count a
// pod their selector lists as a server only when its name says so
// (docs/security.md, B4).
func PodOrdinal(set, pod string) (int32, bool) {
	s, ok := strings.CutPrefix(pod, set+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != s {
		return 0, false
	}
	return int32(n), true
}

// PodSet is the StatefulSet of the pod named pod, as PodOrdinal reads it;
// "" when the name has no ordinal.
func PodSet(pod string) string {
	i := strings.LastIndexByte(pod, '-')
	if i < 0 {
		return ""
	}
	if _, ok := PodOrdinal(pod[:i], pod); !ok {
		return ""
	}
	return pod[:i]
}
