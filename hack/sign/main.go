// Command sign signs and verifies the release's artifacts in an OCI registry with cosign's Go
// module (github.com/sigstore/cosign/v2), key-based and offline (no transparency log, no Fulcio):
// the image index and the chart, each by digest, as `cosign sign --key` / `cosign verify --key
// --insecure-ignore-tlog` do; the signatures are cosign's (a sha256-<digest>.sig manifest beside
// the artifact), which the cosign CLI verifies too.
//
// It is its own module so that cosign's dependencies (sigstore, rekor, TUF, ...) stay out of
// the product's module graph and binary:
//
//	cd hack/sign && go run . keys -out DIR                          # DIR/cosign.key, DIR/cosign.pub
//	cd hack/sign && go run . sign -key DIR/cosign.key REF@sha256:…  # COSIGN_PASSWORD: the key's password
//	cd hack/sign && go run . verify -key DIR/cosign.pub REF@sha256:…
//
// -insecure talks plain HTTP to the registry (a test's in-process one).
package main

import (
	"bytes"
	"context"
	"crypto"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/sigstore/cosign/v2/pkg/cosign"
	"github.com/sigstore/cosign/v2/pkg/oci/mutate"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"github.com/sigstore/cosign/v2/pkg/oci/static"
	sigs "github.com/sigstore/cosign/v2/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sign keys|sign|verify [flags] [REF@sha256:...]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	key := fs.String("key", "", "the private key (sign) or public key (verify), cosign's PEM")
	out := fs.String("out", ".", "keys: the directory of cosign.key and cosign.pub")
	insecure := fs.Bool("insecure", false, "plain HTTP to the registry")
	_ = fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "keys":
		err = keys(*out)
	case "sign", "verify":
		if *key == "" || fs.NArg() == 0 {
			err = errors.New("-key and at least one REF@sha256:... are required")
			break
		}
		for _, r := range fs.Args() {
			var opts []name.Option
			if *insecure {
				opts = append(opts, name.Insecure)
			}
			var d name.Digest
			if d, err = name.NewDigest(r, opts...); err != nil {
				break
			}
			if os.Args[1] == "sign" {
				err = sign(*key, d)
			} else {
				err = verify(context.Background(), *key, d)
			}
			if err != nil {
				err = fmt.Errorf("%s: %w", r, err)
				break
			}
			fmt.Printf("%sed %s\n", map[string]string{"sign": "sign", "verify": "verifi"}[os.Args[1]], d)
		}
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sign:", err)
		os.Exit(1)
	}
}

func password(bool) ([]byte, error) { return []byte(os.Getenv("COSIGN_PASSWORD")), nil }

// keys writes an ECDSA P-256 key pair as cosign generate-key-pair does.
func keys(dir string) error {
	kb, err := cosign.GenerateKeyPair(password)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cosign.key"), kb.PrivateBytes, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cosign.pub"), kb.PublicBytes, 0o644)
}

// sign signs d's simple-signing payload (its reference and digest) and attaches the signature
// to it in its repository.
func sign(keyPath string, d name.Digest) error {
	pem, err := os.ReadFile(keyPath)
	if err != nil {
		return err
	}
	pass, _ := password(false)
	sv, err := cosign.LoadPrivateKey(pem, pass, nil)
	if err != nil {
		return err
	}
	pl, err := payload.Cosign{Image: d}.MarshalJSON()
	if err != nil {
		return err
	}
	sig, err := sv.SignMessage(bytes.NewReader(pl))
	if err != nil {
		return err
	}
	ociSig, err := static.NewSignature(pl, base64.StdEncoding.EncodeToString(sig))
	if err != nil {
		return err
	}
	se, err := ociremote.SignedEntity(d)
	if err != nil {
		return err
	}
	se, err = mutate.AttachSignatureToEntity(se, ociSig)
	if err != nil {
		return err
	}
	return ociremote.WriteSignatures(d.Repository, se)
}

// verify checks that d carries a signature by the public key at keyPath over its own digest.
func verify(ctx context.Context, keyPath string, d name.Digest) error {
	pem, err := os.ReadFile(keyPath)
	if err != nil {
		return err
	}
	v, err := sigs.LoadPublicKeyRaw(pem, crypto.SHA256)
	if err != nil {
		return err
	}
	checked, _, err := cosign.VerifyImageSignatures(ctx, d, &cosign.CheckOpts{SigVerifier: v, IgnoreTlog: true,
		IgnoreSCT: true, ClaimVerifier: cosign.SimpleClaimVerifier})
	if err != nil {
		return err
	}
	if len(checked) == 0 {
		return errors.New("no valid signature")
	}
	return nil
}
