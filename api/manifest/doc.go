// Package manifest reads and writes the declarative files an operator
// applies: YAML (or JSON) documents separated by "---", each with a kind:
// and the object's fields at the top level, as in
//
//	kind: VIPPool
//	name: public
//	cidrs: [192.0.2.0/28]
//	mode: arp
//
// Decoding is strict: an unknown field, a value of the wrong type or a kind
// the cluster manages itself is an error of one line that names the file,
// the document, the object and the field. Encode writes objects in the same
// shape, so what `get -o yaml` prints can be applied again.
package manifest
