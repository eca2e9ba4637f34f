package scoring

import "testing"

func TestParseMedium(t *testing.T) {
	tests := []struct {
		in   string
		want Medium
	}{
		{"", MediumDevice}, {"GPU", MediumDevice}, {"gpu", MediumDevice}, {"DEVICE", MediumDevice},
		{"CPU", MediumHostPinned}, {"cpu", MediumHostPinned}, {"CPU_PINNED", MediumHostPinned}, {"CPU_TIER1", MediumHostPinned},
		{"CPU_TIER2", MediumDisk}, {"DISK", MediumDisk}, {"nvme", MediumDisk},
		{"EXTERNAL", MediumExternal}, {"NETWORK", MediumExternal}, {"REMOTE", MediumExternal}, {"SHARED", MediumExternal},
		{"tape", MediumUnknown},
	}
	for _, tc := range tests {
		if got := ParseMedium(tc.in); got != tc.want {
			t.Errorf("ParseMedium(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if MediumDevice.String() != "device" || MediumHostPinned.String() != "host" || Medium(99).String() != "unknown" {
		t.Error("String names")
	}
}
