package cfntest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/awslabs/goformation/v7"
	"github.com/awslabs/goformation/v7/cloudformation"
	"github.com/awslabs/goformation/v7/intrinsics"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/pyvenv"
	"github.com/dynalimit/dynalimit/internal/testutil"
	"github.com/dynalimit/dynalimit/pkg/dynamo/admin"
)

// templatePath is the template, relative to the repository root.
const templatePath = "cloudformation/dynalimit.yaml"

// Values the references resolve to when the template is parsed.
const (
	fakeAccount = "123456789012"
	fakeRegion  = "us-east-1"
)

func readTemplate(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), templatePath))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCfnLint runs the pinned cfn-lint on the template: no error, warning
// or informational finding but those of the rules the template's Metadata
// ignores, each with its reason.
func TestCfnLint(t *testing.T) {
	root := testutil.RepoRoot(t)
	bin, err := pyvenv.Install(filepath.Join(root, ".cache", "cfn-lint", "venv"), filepath.Join(root, "internal", "cfntest", "requirements.txt"))
	if err != nil {
		t.Fatalf("cfn-lint is needed and could not be installed: %v", err)
	}
	out, err := exec.Command(filepath.Join(bin, "cfn-lint"), "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "1.58.0") {
		t.Fatalf("cfn-lint --version = %q, %v; want 1.58.0", out, err)
	}
	cmd := exec.Command(filepath.Join(bin, "cfn-lint"), "--format", "parseable", "--include-checks", "I", "--", filepath.Join(root, templatePath))
	out, err = cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("cfn-lint %s: %v\n%s", templatePath, err, out)
	}
}

// parsed is the template with every reference resolved to a fixed value
// and noted.
type parsed struct {
	tmpl *cloudformation.Template
	refs []string // "Ref X", "GetAtt X.Y", "Sub X", "If X"
}

var subVar = regexp.MustCompile(`\$\{([^}!][^}]*)\}`)

// parse parses src with goformation, all but the Table's WarmThroughput
// (withoutWarmThroughput). The overrides keep each reference (noted in
// refs) and resolve it to a fixed value: a parameter to its default, the
// table to its name, Table.Arn to an ARN in fakeRegion and fakeAccount, a
// policy to its ARN, Fn::If to its first branch.
func parse(t testing.TB, src []byte) *parsed {
	t.Helper()
	p := &parsed{}
	ref := func(name string, tmpl any) any {
		p.refs = append(p.refs, "Ref "+name)
		switch name {
		case "AWS::Region":
			return fakeRegion
		case "AWS::AccountId":
			return fakeAccount
		case "AWS::Partition":
			return "aws"
		case "AWS::NoValue":
			return nil
		case "Table":
			return defaultOf(tmpl, "TableName")
		}
		if v := defaultOf(tmpl, name); v != nil {
			return v
		}
		return "arn:aws:iam::" + fakeAccount + ":policy/" + name
	}
	getAtt := func(target string, tmpl any) any {
		p.refs = append(p.refs, "GetAtt "+target)
		name, _ := defaultOf(tmpl, "TableName").(string)
		arn := "arn:aws:dynamodb:" + fakeRegion + ":" + fakeAccount + ":table/" + name
		switch target {
		case "Table.Arn":
			return arn
		case "Table.StreamArn":
			return arn + "/stream/2026-01-01T00:00:00.000"
		}
		return "getatt:" + target
	}
	opts := &intrinsics.ProcessorOptions{IntrinsicHandlerOverrides: map[string]intrinsics.IntrinsicHandler{
		"Ref": func(_ string, in any, tmpl any) any {
			s, _ := in.(string)
			return ref(s, tmpl)
		},
		"Fn::GetAtt": func(_ string, in any, tmpl any) any {
			switch v := in.(type) {
			case string:
				return getAtt(v, tmpl)
			case []any:
				if len(v) == 2 {
					return getAtt(fmt.Sprint(v[0])+"."+fmt.Sprint(v[1]), tmpl)
				}
			}
			p.refs = append(p.refs, fmt.Sprintf("GetAtt %v", in))
			return nil
		},
		"Fn::Sub": func(_ string, in any, tmpl any) any {
			s, ok := in.(string)
			if !ok {
				p.refs = append(p.refs, fmt.Sprintf("Sub %v", in)) // the list form is not used
				return nil
			}
			return subVar.ReplaceAllStringFunc(s, func(m string) string {
				name := m[2 : len(m)-1]
				p.refs = append(p.refs, "Sub "+name)
				if strings.Contains(name, ".") && !strings.HasPrefix(name, "AWS::") {
					return fmt.Sprint(getAtt(name, tmpl))
				}
				return fmt.Sprint(ref(name, tmpl))
			})
		},
		"Fn::If": func(_ string, in any, _ any) any {
			v, ok := in.([]any)
			if !ok || len(v) != 3 {
				p.refs = append(p.refs, fmt.Sprintf("If %v", in))
				return nil
			}
			p.refs = append(p.refs, fmt.Sprint("If ", v[0]))
			return v[1]
		},
	}}
	tmpl, err := goformation.ParseYAMLWithOptions(withoutWarmThroughput(t, src), opts)
	if err != nil {
		t.Fatalf("goformation: %v", err)
	}
	p.tmpl = tmpl
	return p
}

// defaultOf returns parameter name's default in the raw template tmpl.
func defaultOf(tmpl any, name string) any {
	m, _ := tmpl.(map[string]any)
	ps, _ := m["Parameters"].(map[string]any)
	p, _ := ps[name].(map[string]any)
	if p == nil {
		return nil
	}
	return p["Default"]
}

// TestReferences checks that every Ref, Fn::GetAtt, Fn::Sub variable and
// Fn::If condition names something the template or CloudFormation defines.
func TestReferences(t *testing.T) {
	p := parse(t, readTemplate(t))
	known := map[string]bool{"AWS::Region": true, "AWS::AccountId": true, "AWS::Partition": true, "AWS::NoValue": true, "AWS::StackName": true}
	for n := range p.tmpl.Parameters {
		known[n] = true
	}
	for n := range p.tmpl.Resources {
		known[n] = true
	}
	if len(p.refs) == 0 {
		t.Fatal("no reference was seen: the overrides did not run")
	}
	for _, r := range p.refs {
		kind, target, _ := strings.Cut(r, " ")
		switch kind {
		case "Ref", "Sub":
			name, attr, _ := strings.Cut(target, ".")
			if attr != "" && strings.HasPrefix(name, "AWS::") {
				name = target
			}
			if !known[name] {
				t.Errorf("%s: %q is neither a parameter, a resource nor a pseudo parameter", r, name)
			}
			if attr != "" {
				if _, ok := p.tmpl.Resources[name]; !ok {
					t.Errorf("%s: %q is not a resource", r, name)
				}
			}
		case "GetAtt":
			name, attr, ok := strings.Cut(target, ".")
			if _, isRes := p.tmpl.Resources[name]; !ok || !isRes || attr == "" {
				t.Errorf("%s: want Resource.Attribute naming a resource", r)
			}
		case "If":
			if _, ok := p.tmpl.Conditions[target]; !ok {
				t.Errorf("%s: no such condition", r)
			}
		default:
			t.Errorf("%s: unexpected form", r)
		}
	}
}

// recordingAPI is the fake DynamoDB, keeping the inputs of the calls that
// define a table.
type recordingAPI struct {
	*dynamotest.Fake
	create *dynamodb.CreateTableInput
	ttl    *dynamodb.UpdateTimeToLiveInput
}

func (r *recordingAPI) CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, o ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	r.create = in
	return r.Fake.CreateTable(ctx, in, o...)
}

func (r *recordingAPI) UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	r.ttl = in
	return r.Fake.UpdateTimeToLive(ctx, in, o...)
}

// TestTableIsCreateTables compares the template's table with what
// admin.CreateTable asks DynamoDB for: attributes, key schema, GSI1 with
// its projection, billing, stream and TTL; and checks what the template
// adds (point-in-time recovery, deletion protection from its parameter,
// encryption, retention).
func TestTableIsCreateTables(t *testing.T) {
	api := &recordingAPI{Fake: dynamotest.NewFake()}
	if err := admin.CreateTable(context.Background(), api, "dynalimit"); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	if api.create == nil || api.ttl == nil {
		t.Fatal("CreateTable made no CreateTable or UpdateTimeToLive call")
	}
	want := api.create
	p := parse(t, readTemplate(t))
	tbl, err := p.tmpl.GetDynamoDBTableWithName("Table")
	if err != nil {
		t.Fatal(err)
	}
	str := func(v any) string { return fmt.Sprint(v) }
	var gotAttrs, wantAttrs []string
	for _, a := range tbl.AttributeDefinitions {
		gotAttrs = append(gotAttrs, a.AttributeName+" "+a.AttributeType)
	}
	for _, a := range want.AttributeDefinitions {
		wantAttrs = append(wantAttrs, aws.ToString(a.AttributeName)+" "+str(a.AttributeType))
	}
	slices.Sort(gotAttrs)
	slices.Sort(wantAttrs)
	check := func(what string, got, want any) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: template %v, CreateTable %v", what, got, want)
		}
	}
	check("AttributeDefinitions", gotAttrs, wantAttrs)
	var gotKeys, wantKeys []string
	for _, k := range tbl.KeySchema {
		gotKeys = append(gotKeys, k.AttributeName+" "+k.KeyType)
	}
	for _, k := range want.KeySchema {
		wantKeys = append(wantKeys, aws.ToString(k.AttributeName)+" "+str(k.KeyType))
	}
	check("KeySchema", gotKeys, wantKeys)
	var gotGSI, wantGSI []string
	for _, g := range tbl.GlobalSecondaryIndexes {
		s := g.IndexName
		for _, k := range g.KeySchema {
			s += " " + k.AttributeName + " " + k.KeyType
		}
		if g.Projection != nil {
			s += " projection " + aws.ToString(g.Projection.ProjectionType) + fmt.Sprint(g.Projection.NonKeyAttributes)
		}
		if g.ProvisionedThroughput != nil {
			s += " provisioned"
		}
		gotGSI = append(gotGSI, s)
	}
	for _, g := range want.GlobalSecondaryIndexes {
		s := aws.ToString(g.IndexName)
		for _, k := range g.KeySchema {
			s += " " + aws.ToString(k.AttributeName) + " " + str(k.KeyType)
		}
		if g.Projection != nil {
			s += " projection " + str(g.Projection.ProjectionType) + fmt.Sprint(g.Projection.NonKeyAttributes)
		}
		if g.ProvisionedThroughput != nil {
			s += " provisioned"
		}
		wantGSI = append(wantGSI, s)
	}
	check("GlobalSecondaryIndexes", gotGSI, wantGSI)
	check("LocalSecondaryIndexes", len(tbl.LocalSecondaryIndexes), len(want.LocalSecondaryIndexes))
	check("BillingMode", aws.ToString(tbl.BillingMode), str(want.BillingMode))
	check("ProvisionedThroughput", tbl.ProvisionedThroughput != nil, want.ProvisionedThroughput != nil)
	if tbl.StreamSpecification == nil || want.StreamSpecification == nil {
		t.Errorf("StreamSpecification: template %v, CreateTable %v", tbl.StreamSpecification, want.StreamSpecification)
	} else {
		check("StreamViewType", tbl.StreamSpecification.StreamViewType, str(want.StreamSpecification.StreamViewType))
		check("StreamEnabled", true, aws.ToBool(want.StreamSpecification.StreamEnabled))
	}
	if tbl.TimeToLiveSpecification == nil {
		t.Error("TimeToLiveSpecification: none in the template")
	} else {
		check("TTL attribute", aws.ToString(tbl.TimeToLiveSpecification.AttributeName), aws.ToString(api.ttl.TimeToLiveSpecification.AttributeName))
		check("TTL enabled", tbl.TimeToLiveSpecification.Enabled, aws.ToBool(api.ttl.TimeToLiveSpecification.Enabled))
	}
	check("TableName", aws.ToString(tbl.TableName), "dynalimit") // Ref TableName, its default

	// What the template adds to CreateTable's definition.
	if tbl.PointInTimeRecoverySpecification == nil || tbl.PointInTimeRecoverySpecification.PointInTimeRecoveryEnabled == nil || !*tbl.PointInTimeRecoverySpecification.PointInTimeRecoveryEnabled {
		t.Error("PointInTimeRecoverySpecification: want enabled")
	}
	if tbl.SSESpecification == nil || !tbl.SSESpecification.SSEEnabled {
		t.Error("SSESpecification: want SSEEnabled")
	}
	if tbl.DeletionProtectionEnabled == nil || !*tbl.DeletionProtectionEnabled {
		t.Error("DeletionProtectionEnabled: want the DeletionProtected branch (true) by default")
	}
	if !slices.Contains(p.refs, "If DeletionProtected") {
		t.Error("DeletionProtectionEnabled does not come from the DeletionProtection parameter")
	}
	if tbl.AWSCloudFormationDeletionPolicy != "Retain" || tbl.AWSCloudFormationUpdateReplacePolicy != "Retain" {
		t.Errorf("DeletionPolicy %q, UpdateReplacePolicy %q: want Retain", tbl.AWSCloudFormationDeletionPolicy, tbl.AWSCloudFormationUpdateReplacePolicy)
	}
}
