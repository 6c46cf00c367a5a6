package manifest

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Leaf is one value of an object at its field path, as an operator writes
// the path: "listeners[0].port", "pools.web.members[1]".
type Leaf struct {
	Path  string
	Value string
}

// Flatten lists the values of the object inside o, in the order Encode
// writes them, one per leaf field. An empty message (healthCheck.tcp: {})
// is a leaf with value "{}"; empty lists and maps have none. Fields named
// in skip (top-level paths such as "meta") are left out.
func Flatten(o *pb.Object, skip ...string) []Leaf {
	m, ok := api.Unwrap(o).(proto.Message)
	if !ok {
		return nil
	}
	drop := make(map[string]bool, len(skip))
	for _, s := range skip {
		drop[s] = true
	}
	var out []Leaf
	var walk func(path string, v any)
	walk = func(path string, v any) {
		if drop[path] {
			return
		}
		switch v := v.(type) {
		case ordered:
			if len(v) == 0 {
				out = append(out, Leaf{path, "{}"})
			}
			for _, f := range v {
				walk(join(path, f.key), f.val)
			}
		case []any:
			for i, item := range v {
				walk(path+"["+strconv.Itoa(i)+"]", item)
			}
		case string:
			out = append(out, Leaf{path, v})
		default:
			out = append(out, Leaf{path, fmt.Sprint(v)})
		}
	}
	walk("", messageValue(m.ProtoReflect()))
	return out
}
