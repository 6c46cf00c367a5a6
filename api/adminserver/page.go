package adminserver

import (
	"encoding/base64"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/teapot-lb/teapot-lb/api"
	pb "github.com/teapot-lb/teapot-lb/api/proto/teapotv1"
)

// Bounds of one List page: a page holds at most the asked page size (at
// most MaxPageSize, DefaultPageSize when not asked) and stops before its
// encoded objects pass MaxPageBytes, far below gRPC's 4 MB message limit.
// A page always holds at least one object; validation bounds the size of
// each (api.MaxObjectBytes).
const (
	DefaultPageSize = 500
	MaxPageSize     = 5000
	MaxPageBytes    = 1 << 20
)

// pageToken names where the next page starts: after the object with this
// tenant and name, in the store's order (tenant, then name).
func pageToken(o *pb.Object) string {
	ref := api.RefOf(o)
	return base64.RawURLEncoding.EncodeToString([]byte(ref.GetTenant() + "\x00" + ref.GetName()))
}

func parsePageToken(s string) (tenant, name string, err error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return "", "", fmt.Errorf("page_token: not a token this server handed out; pass next_page_token of the previous page: %w", api.ErrInvalid)
	}
	tenant, name, ok := strings.Cut(string(b), "\x00")
	if !ok {
		return "", "", fmt.Errorf("page_token: not a token this server handed out; pass next_page_token of the previous page: %w", api.ErrInvalid)
	}
	return tenant, name, nil
}

// page cuts one page out of objs (sorted by tenant, then name).
func page(objs []*pb.Object, req *pb.ListRequest) ([]*pb.Object, string, error) {
	start := 0
	if tok := req.GetPageToken(); tok != "" {
		tenant, name, err := parsePageToken(tok)
		if err != nil {
			return nil, "", err
		}
		start = sort.Search(len(objs), func(i int) bool {
			ref := api.RefOf(objs[i])
			if ref.GetTenant() != tenant {
				return ref.GetTenant() > tenant
			}
			return ref.GetName() > name
		})
	}
	size := int(req.GetPageSize())
	if size == 0 {
		size = DefaultPageSize
	}
	size = min(size, MaxPageSize)
	end, bytes := start, 0
	for end < len(objs) && end-start < size {
		n := proto.Size(objs[end])
		if end > start && bytes+n > MaxPageBytes {
			break
		}
		bytes += n
		end++
	}
	next := ""
	if end < len(objs) {
		next = pageToken(objs[end-1])
	}
	return objs[start:end], next, nil
}
