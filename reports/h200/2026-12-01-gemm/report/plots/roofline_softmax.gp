# Written by `shapetune report`. Render: gnuplot DIR/plots/roofline_softmax.gp (from any directory).
here = ARG0[1:strlen(ARG0) - strlen("roofline_softmax.gp")]
data = here . "../data/"
reset
set terminal svg size 900,600 dynamic noenhanced font "sans,11" background rgb "white"
set output here . "roofline_softmax.svg"
set title "roofline: softmax (measured ceilings only)"
set logscale xy
set xlabel "arithmetic intensity (FLOP/byte)"
set ylabel "achieved FLOP/s"
set grid
set key top left
set xrange [0.15625:5]
set yrange [7.95976e+09:8.50933e+13]
plot data . "roofline_softmax_winners.dat" using 1:2 with points pt 7 ps 1.2 title "winner", \
     data . "roofline_softmax_baselines.dat" using 1:2 with points pt 6 ps 1.2 title "best baseline", \
     4.25467e+12 * x with lines lw 2 title "DRAM copy ceiling (4.25 TB/s)"
