# Written by `shapetune report`. Render: gnuplot DIR/plots/roofline_gemm_bias_gelu.gp (from any directory).
here = ARG0[1:strlen(ARG0) - strlen("roofline_gemm_bias_gelu.gp")]
data = here . "../data/"
reset
set terminal svg size 900,600 dynamic noenhanced font "sans,11" background rgb "white"
set output here . "roofline_gemm_bias_gelu.svg"
set title "roofline: gemm_bias_gelu (measured ceilings only)"
set logscale xy
set xlabel "arithmetic intensity (FLOP/byte)"
set ylabel "achieved FLOP/s"
set grid
set key top left
set xrange [113.765:1820.25]
set yrange [4.35913e+13:3.09782e+16]
plot data . "roofline_gemm_bias_gelu_winners.dat" using 1:2 with points pt 7 ps 1.2 title "winner", \
     4.25467e+12 * x with lines lw 2 title "DRAM copy ceiling (4.25 TB/s)"
